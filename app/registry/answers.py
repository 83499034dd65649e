"""Answers about stored versions kept on disk: a view of a stored archive (its graph, an
inspection view, its validation, ranges, tensors) or a diff of two, computed once and served
from then on, by this process, after a restart or by another replica sharing the data
directory. Stored archives never change, so an answer is named by the digests of the archives
it is computed from, the view's parameters and the answers' format (`FORMAT`); that name is
also its ETag. gc removes the answers that name an archive no kept version has, and those of
another format (app/registry/gc.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from app.registry.blobs import is_digest
from app.settings import Settings

_SUFFIX = ".json"
#: The format of every kept answer: bump it when what any view or diff answers changes (its
#: fields, or what it computes), so that a service upgraded over a data directory computes its
#: answers again instead of serving those of the code before, and a browser's copies, which it
#: revalidates by ETag, are replaced. Answers of another format are gc's.
FORMAT = 3
_FORMAT_PART = f"f{FORMAT}"


def answers_folder(settings: Settings) -> Path:
    """The folder of kept answers, ``<digest>[.<digest>].<view>.json`` each."""
    return settings.data_dir / "answers"


def view_name(kind: str, *parameters: object) -> str:
    """A view's part of an answer's name: its kind, and a hash of its parameters (any text,
    such as a model name, stays out of file names)."""
    if not parameters:
        return kind
    text = repr(parameters).encode()
    return f"{kind}-{hashlib.sha256(text).hexdigest()[:16]}"


def answer_name(digests: Sequence[str], view: str) -> str:
    """The name of the answer `view` computes from the archives `digests` (in order), in this
    code's format."""
    assert all(is_digest(d) for d in digests), digests
    return ".".join([*digests, view, _FORMAT_PART])


def answer_path(settings: Settings, name: str) -> Path:
    """Where the answer `name` is kept."""
    return answers_folder(settings) / f"{name}{_SUFFIX}"


def dead_answers(settings: Settings, kept: Iterable[str]) -> list[Path]:
    """The kept answers computed from an archive no kept version has, or in another format than
    this code's (half-written ones, whose names start with a dot, are the writer's)."""
    folder = answers_folder(settings)
    if not folder.is_dir():
        return []
    live = set(kept)
    return sorted(path for path in folder.iterdir() if _dead(path, live))


def _dead(path: Path, live: set[str]) -> bool:
    if path.suffix != _SUFFIX or path.name.startswith("."):
        return False
    parts = path.stem.split(".")
    digests = [part for part in parts if is_digest(part)]
    if not digests:
        return False
    return parts[-1] != _FORMAT_PART or any(d not in live for d in digests)
