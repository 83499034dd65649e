"""Graph answers of stored versions, built once per archive and kept on disk.

A large program's graph takes seconds to build (reading and screening the document, then the
module tree and the node columns), far past what a first view may take; a stored archive never
changes, so its answer is built when the version is pushed (after the push has answered) and
served as a file from then on. The archive digest names the file, as it names the ETag.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from app import operations as ops
from app.failure import Failure
from app.files import write_atomic
from app.programs.inspect.graph_view import program_graph
from app.registry import Registry
from app.settings import Settings

#: One lock per archive being built in this process: a view asked for while the push's build
#: runs waits for it instead of building the same answer again.
_building: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def graph_bytes(source: ops.Source, settings: Settings, model: str | None) -> bytes:
    """The graph answer (JSON) of one model of a source."""
    document = ops.read_document(source, model, settings)
    return program_graph(document.doc).model_dump_json().encode()


def _folder(settings: Settings) -> Path:
    return settings.data_dir / "graphs"


def cached_graph(registry: Registry, digest: str, build: Callable[[], bytes]) -> Path:
    """The file holding the graph answer of the archive `digest`, built by `build` if missing."""
    target = _folder(registry.settings) / f"{digest}.json"
    if target.exists():
        return target
    with _guard:
        lock = _building.setdefault(digest, threading.Lock())
    with lock:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, build())
    with _guard:
        _building.pop(digest, None)
    return target


def version_graph_file(registry: Registry, name: str, ref: str) -> Path:
    """The graph answer of a live stored version, as a file (built on first need)."""
    info = registry.version(name, ref)

    def build() -> bytes:
        # opening the source refuses a deleted version, as every view of one does
        with registry.source(name, str(info.version)) as (found, source):
            return graph_bytes(source, registry.settings, found.archive_model)

    if info.deleted_at is not None:
        build()
    return cached_graph(registry, info.digests.archive, build)


def warm(registry: Registry, name: str, version: int) -> None:
    """Build a freshly pushed version's graph answer ahead of its first view (a background
    task: a program the graph cannot be drawn for answers its problem when viewed)."""
    with contextlib.suppress(Failure):
        version_graph_file(registry, name, str(version))
