"""The rules of the running torch's `weights_only` unpickler, as plain data.

Part of a release's rules file (`app/bridge/release_dump.py`, torch and the standard library
only). The pickle machine in `app.archive` reads them and never imports torch; the installed
release's file is kept current by `tests/bridge/test_release_rules_current.py`. The
user-allowed globals are those registered once `torch.export.load` has imported what it needs
(torch._dynamo and torch.distributed register theirs on import), the context sample inputs are
read in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch._dynamo  # noqa: F401  (registers its safe globals, as torch.export.load does)
import torch._weights_only_unpickler as weights_only
import torch.serialization
from torch._utils import IMPORT_MAPPING, NAME_MAPPING

_OBJECT_NEW: Any = object.__new__


def _describe(value: Any) -> dict[str, Any]:
    if isinstance(value, torch.dtype):
        return {"kind": "dtype"}
    if isinstance(value, torch.serialization.StorageType):
        return {"kind": "storage-type", "dtype": str(value.dtype)}
    if isinstance(value, torch.qscheme):
        return {"kind": "qscheme"}
    if type(value).__name__ == "tensortype":
        # legacy tensor types (torch.FloatTensor) carry a dtype a storage id may name
        return {"kind": "tensor-type", "dtype": str(value.dtype)}
    if isinstance(value, type):
        described: dict[str, Any] = {
            "kind": "class",
            "tensor": issubclass(value, torch.Tensor),
            "setstate": "__setstate__" in vars(value),
            "plain_new": value.__new__ is _OBJECT_NEW,
        }
        setstate = getattr(value, "__setstate__", None)
        if dataclasses.is_dataclass(value) and getattr(setstate, "__name__", "") == (
            "_dataclass_setstate"
        ):
            # a slots dataclass: BUILD sets its fields from a list, one value each
            described["state_fields"] = len(dataclasses.fields(value))
        return described
    if callable(value):
        return {"kind": "function"}
    raise TypeError(f"unexpected allowed global {value!r}")


def _element_size(dtype: torch.dtype) -> int | None:
    """What torch.load sizes a storage of `dtype` by; None where it raises (sub-byte dtypes)."""
    try:
        return int(torch._utils._element_size(dtype))  # type: ignore[no-untyped-call]
    except (TypeError, RuntimeError):
        return None


def _dtypes() -> dict[str, dict[str, Any]]:
    dtypes = {str(v): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return {
        name: {
            "itemsize": _element_size(dtype),
            "grad": dtype.is_floating_point or dtype.is_complex,
        }
        for name, dtype in sorted(dtypes.items())
    }


def rules() -> dict[str, Any]:
    """torch's weights_only rules in the running interpreter, as sorted JSON-ready data."""
    allowed = weights_only._get_allowed_globals()
    user = weights_only._get_user_allowed_globals()  # type: ignore[no-untyped-call]
    layouts = sorted(str(v) for v in vars(torch).values() if isinstance(v, torch.layout))
    return {
        "torch": torch.__version__.split("+")[0],
        "allowed": {name: _describe(allowed[name]) for name in sorted(allowed)},
        "user_allowed": {name: _describe(user[name]) for name in sorted(user)},
        "blocked_modules": sorted(weights_only._blocklisted_modules),
        "import_mapping": dict(sorted(IMPORT_MAPPING.items())),
        "name_mapping": sorted([[*old, *new] for old, new in NAME_MAPPING.items()]),
        "dtypes": _dtypes(),
        "layouts": layouts,
        "tensor_attributes": sorted(set(dir(torch.nn.Parameter)) | set(dir(torch.Tensor))),
    }
