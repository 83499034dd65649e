"""Graph answers of stored versions, built once per archive and kept on disk.

A large program's graph takes seconds to build (reading and screening the document, then the
module tree and the node columns), far past what a first view may take; a stored archive never
changes, so its answer is built when the version is pushed (after the push has answered, in a
document worker, from the document the push checked) and served as a file from then on. The
archive digest names the file, as it names the ETag.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from app.failure import Failure
from app.files import write_atomic
from app.registry import Registry
from app.registry.gc import graph_answers
from app.registry.records import VersionInfo
from app.workers.documents import DocumentRunner
from app.workers.pushes import PushFiles, graph_bytes, job_graph

__all__ = ["cached_graph", "graph_bytes", "version_graph_file", "warm"]

#: One lock per archive being built in this process: a view asked for while the push's build
#: runs waits for it instead of building the same answer again.
_building: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def cached_graph(registry: Registry, digest: str, build: Callable[[Path], None]) -> Path:
    """The file holding the graph answer of the archive `digest`, written by `build` (given
    where, and writing it atomically) if missing."""
    target = graph_answers(registry.settings) / f"{digest}.json"
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


def version_graph_file(registry: Registry, name: str, ref: str) -> Path:
    """The graph answer of a live stored version, as a file (built on first need)."""
    info = registry.version(name, ref)
    if info.deleted_at is not None:
        # opening the source refuses a deleted version, as every view of one does
        with registry.source(name, str(info.version)):
            pass

    def build(target: Path) -> None:
        with registry.source(name, str(info.version)) as (found, source):
            write_atomic(target, graph_bytes(source, registry.settings, found.archive_model))

    return cached_graph(registry, info.digests.archive, build)


def warm(registry: Registry, runner: DocumentRunner, info: VersionInfo, files: PushFiles) -> None:
    """Build a freshly pushed version's graph answer ahead of its first view (a background task:
    a program the graph cannot be drawn for answers its problem when viewed), from the document
    its push checked, in a document worker when it is large; then remove the push's files."""
    settings = registry.settings

    def build(target: Path) -> None:
        size = files.document.stat().st_size
        runner.run(size, job_graph, files.document, settings, target)

    try:
        with contextlib.suppress(Failure, OSError):
            cached_graph(registry, info.digests.archive, build)
    finally:
        shutil.rmtree(files.folder, ignore_errors=True)
