"""The torch jobs the service submits to the worker pool: plain bytes, paths and dicts in and out.

Importable without torch (the server names these functions); torch is imported in the worker.
Tensors are named by a `TensorSource` and read here, in the worker, never in the service.
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


def job_deserialize_to_pt2(doc_json: bytes, tensors: TensorSource, target: Path) -> None:
    """Write to `target` the .pt2 of the program torch builds from a document and its tensors."""
    from app.bridge.exported import write_pt2

    write_pt2(_document(doc_json), tensors.read(), target)


def job_torch_check(doc_json: bytes, tensors: TensorSource) -> dict[str, Any]:
    """`torch_check` of a document and its tensors, as `TorchCheck.to_dict()` data."""
    from app.bridge.checks import torch_check

    return torch_check(_document(doc_json), tensors.read()).to_dict()


def _document(doc_json: bytes) -> schema.ExportedProgram:
    try:
        return schema.load(doc_json)
    except schema.DocumentInvalid as exc:
        raise BridgeFailure("document-invalid", str(exc), exc.issues) from None
