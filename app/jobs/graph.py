"""The graph answer's jobs, run in a document worker whatever the program's size: building the
answer of a large program takes seconds of reading, screening and walking it, which would hold
the API process (and its event loop) that long. A job is given a path and writes the answer to
the path it is given; nothing but the call's outcome comes back.
"""

from __future__ import annotations

from pathlib import Path

from app import operations as ops
from app.files import write_atomic
from app.programs.inspect.graph_view import program_graph
from app.settings import Settings


def graph_bytes(source: ops.Source, settings: Settings, model: str | None) -> bytes:
    """The graph answer (JSON) of one model of a source."""
    document = ops.read_document(source, model, settings)
    weights = ops.weight_infos(source, document.name)
    return program_graph(document.doc, weights).model_dump_json().encode()


def job_graph(
    upload: Path, media: ops.Media, settings: Settings, model: str | None, target: Path
) -> None:
    """Write the graph answer of one model of an upload (a .pt2 or a JSON document) to
    `target`, atomically."""
    with ops.open_source(upload, media, settings) as source:
        write_atomic(target, graph_bytes(source, settings, model))


def job_document_graph(document: Path, settings: Settings, target: Path) -> None:
    """Write the graph answer of one bare document (a stored version's, or the one a push
    checked) to `target`, atomically."""
    # a bare document, not read as JSON uploads are: a document that opens with a "documents"
    # key stays one document (as it was in its archive), not serialize's output
    source = ops.Source({"model": document.read_bytes()})
    write_atomic(target, graph_bytes(source, settings, None))
