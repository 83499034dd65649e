"""The only package that imports torch, and only lazily: `import app.bridge` leaves torch alone.

torch-free here: safetensors I/O, raw-tensor helpers, tensor sources and the torch jobs'
functions (the pool that runs them is app.workers.torch). Reached through attributes that import
torch on first use: `serialize`, `deserialize`, `write_pt2`, `save_pt2`, `pt2_bytes`,
`load_pt2_trusted`, `SerializedProgram`, `torch_check`, `TorchCheck`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from app.bridge.errors import BridgeFailure
from app.bridge.safetensors_io import (
    StoredTensor,
    from_safetensors,
    to_safetensors,
    write_safetensors,
)
from app.bridge.sources import TensorSource

if TYPE_CHECKING:
    from app.bridge.checks import torch_check
    from app.bridge.exported import (
        SerializedProgram,
        deserialize,
        load_pt2_trusted,
        pt2_bytes,
        save_pt2,
        serialize,
        write_pt2,
    )
    from app.bridge.report import TorchCheck

_LAZY: dict[str, str] = {
    "SerializedProgram": "app.bridge.exported",
    "serialize": "app.bridge.exported",
    "deserialize": "app.bridge.exported",
    "write_pt2": "app.bridge.exported",
    "save_pt2": "app.bridge.exported",
    "pt2_bytes": "app.bridge.exported",
    "load_pt2_trusted": "app.bridge.exported",
    "TorchCheck": "app.bridge.report",
    "torch_check": "app.bridge.checks",
}

__all__ = [
    "BridgeFailure",
    "SerializedProgram",
    "StoredTensor",
    "TensorSource",
    "TorchCheck",
    "deserialize",
    "from_safetensors",
    "load_pt2_trusted",
    "pt2_bytes",
    "save_pt2",
    "serialize",
    "to_safetensors",
    "torch_check",
    "write_pt2",
    "write_safetensors",
]


def __getattr__(name: str) -> Any:
    """Import the torch-using module behind `name` on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'app.bridge' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
