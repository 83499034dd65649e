"""The torch jobs the service submits to the worker pool: plain bytes, tuples and dicts in and out.

Importable without torch (the server names these functions); torch is imported in the worker.
Tensors travel as `app.bridge.tensors.TensorRecord` tuples (see `pack_tensors`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import schema
from app.bridge.errors import BridgeFailure
from app.bridge.tensors import TensorRecord, unpack_tensors


def job_ping() -> int:
    """The worker's pid: proves a worker is up and answering."""
    return os.getpid()


def job_deserialize_to_pt2(doc_json: bytes, tensors: Sequence[TensorRecord]) -> bytes:
    """The .pt2 of the program torch builds from a document and its tensors."""
    from app.bridge.exported import deserialize, pt2_bytes

    return pt2_bytes(deserialize(_document(doc_json), unpack_tensors(tensors)))


def job_torch_check(doc_json: bytes, tensors: Sequence[TensorRecord]) -> dict[str, Any]:
    """`torch_check` of a document and its tensors, as `TorchCheck.to_dict()` data."""
    from app.bridge.checks import torch_check

    return torch_check(_document(doc_json), unpack_tensors(tensors)).to_dict()


def _document(doc_json: bytes) -> schema.ExportedProgram:
    try:
        return schema.load(doc_json)
    except schema.DocumentInvalid as exc:
        raise BridgeFailure("document-invalid", str(exc), exc.issues) from None
