"""Graph answers: of stored versions, built once per archive and kept on disk; of uploads, built
for the request. Every one is built in a document worker (app.jobs.graph), never here.

A large program's graph takes seconds to build (reading and screening the document, then the
module tree and the node columns), far past what a first view may take; a stored archive never
changes, so its answer is built when the version is pushed (after the push has answered, from
the document the push checked) and served as a file from then on. The archive digest names the
file, as it names the ETag.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVarTuple

from app import operations as ops
from app.api import stored
from app.api.deps import Work
from app.failure import Failure
from app.jobs.graph import job_document_graph, job_graph
from app.jobs.push import PushFiles
from app.registry.answers import answer_name, answer_path
from app.registry.records import VersionInfo
from app.registry.store import Registry
from app.settings import Settings
from app.workers.runner import DocumentRunner

__all__ = ["cached_graph", "graph_answer", "upload_graph", "version_graph_file", "warm"]

#: One lock per archive being built in this process: a view asked for while the push's build
#: runs waits for it instead of building the same answer again.
_building: dict[str, threading.Lock] = {}
_guard = threading.Lock()
_Ts = TypeVarTuple("_Ts")


def graph_answer(digest: str) -> str:
    """The name of the archive `digest`'s kept graph answer (app/registry/answers.py)."""
    return answer_name([digest], "graph")


def cached_graph(registry: Registry, digest: str, build: Callable[[Path], None]) -> Path:
    """The file holding the graph answer of the archive `digest`, written by `build` (given
    where, and writing it atomically) if missing."""
    target = answer_path(registry.settings, graph_answer(digest))
    if target.exists():
        return target
    with _guard:
        lock = _building.setdefault(digest, threading.Lock())
    with lock:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            build(target)
    with _guard:
        _building.pop(digest, None)
    return target


def _in_worker(runner: DocumentRunner, size: int, job: Callable[[*_Ts], None], *args: *_Ts) -> None:
    # not the runner's `run`, which would build a small program's answer in this process; the
    # job's time limit grows with `size`, the bytes of the program's documents
    runner.submit(job, *args, timeout_s=runner.spec.time_limit(size))


def upload_graph(
    work: Work, upload: Path, media: ops.Media, settings: Settings, model: str | None, target: Path
) -> None:
    """Write the graph answer of one model of an admitted upload to `target`."""
    _in_worker(work.runner, work.document_bytes, job_graph, upload, media, settings, model, target)


def _document_graph(
    runner: DocumentRunner, document: Path, settings: Settings, target: Path
) -> None:
    """Write the graph answer of a bare document to `target`."""
    _in_worker(runner, document.stat().st_size, job_document_graph, document, settings, target)


def version_graph_file(registry: Registry, runner: DocumentRunner, name: str, ref: str) -> Path:
    """The graph answer of a live stored version, as a file (built on first need)."""
    info = registry.version(name, ref)
    if info.deleted_at is not None:
        # opening the source refuses a deleted version, as every view of one does
        with registry.source(name, str(info.version)):
            pass

    def build(target: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="pt2serde-graph-") as folder:
            document = Path(folder) / "document.json"
            # reading the stored document is this process's I/O; the worker reads it from there
            with registry.source(name, str(info.version)) as (found, source):
                document.write_bytes(source.documents[found.archive_model])
            _document_graph(runner, document, registry.settings, target)

    return cached_graph(registry, info.digests.archive, build)


def warm(registry: Registry, runner: DocumentRunner, info: VersionInfo, files: PushFiles) -> None:
    """Build a freshly pushed version's graph answer ahead of its first view (a background task:
    a program the graph cannot be drawn for answers its problem when viewed), from the document
    its push checked, then its page's other answers (`stored.warm`); then remove the push's
    files."""
    settings = registry.settings

    def build(target: Path) -> None:
        _document_graph(runner, files.document, settings, target)

    try:
        with contextlib.suppress(Failure, OSError):
            cached_graph(registry, info.digests.archive, build)
        with contextlib.suppress(Failure, OSError):
            stored.warm(registry, runner, info)
    finally:
        shutil.rmtree(files.folder, ignore_errors=True)
