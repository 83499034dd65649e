"""The torch jobs the service submits to the worker pool: plain bytes, paths and dicts in and out.

Importable without torch (the server names these functions); torch is imported in the worker.
Tensors are named by a `TensorSource` and read here, in the worker, never in the service.
Validation at level torch and deserialization are one job (`_torch_job`): the same checks and
the same build by torch's deserializer, so a program one accepts the other rebuilds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import schema
from app.bridge.errors import BridgeFailure
from app.bridge.sources import TensorSource


def job_ping() -> int:
    """The worker's pid: proves a worker is up and answering."""
    return os.getpid()


def job_deserialize_to_pt2(doc_json: bytes | Path, tensors: TensorSource, target: Path) -> None:
    """Write to `target` the .pt2 of the program torch builds from a document (its bytes, or a
    file of them) and its tensors; fails with what `job_torch_check` reports when torch cannot
    build it."""
    _torch_job(doc_json, tensors, target)


def job_torch_check(doc_json: bytes | Path, tensors: TensorSource) -> dict[str, Any]:
    """`torch_check` of a document (its bytes, or a file of them) and its tensors, as
    `TorchCheck.to_dict()` data."""
    return _torch_job(doc_json, tensors, None)


def _torch_job(
    doc_json: bytes | Path, tensors: TensorSource, target: Path | None
) -> dict[str, Any]:
    from app.bridge.checks import check_and_build
    from app.bridge.exported import write_built

    doc = _document(doc_json)
    named = tensors.read()
    built = check_and_build(doc, named)
    if target is None:
        return built.check.to_dict()
    if built.program is None:
        failure = built.failure
        if failure is not None and failure.code != "torch-deserialize-failed":
            raise failure  # our own refusal of the input (weights, screen), with its code
        raise _refusal(built.check.issues)
    write_built(doc, named, target)
    return built.check.to_dict()


def _refusal(issues: list[schema.Issue]) -> BridgeFailure:
    """Why torch cannot build the program: every issue, the first one's message in the lead."""
    first = issues[0]
    more = f" (and {len(issues) - 1} more issue(s))" if len(issues) > 1 else ""
    return BridgeFailure("torch-deserialize-failed", f"{first.message}{more}", issues)


def _document(doc_json: bytes | Path) -> schema.ExportedProgram:
    try:
        return schema.load(doc_json if isinstance(doc_json, bytes) else doc_json.read_bytes())
    except schema.DocumentInvalid as exc:
        raise BridgeFailure("document-invalid", str(exc), exc.issues) from None
