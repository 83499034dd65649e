"""Jobs the pool tests submit; they run inside worker processes."""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable

import torch

import schema
from app.failure import BridgeFailure
from app.tensors.sources import TensorSource
from schema import Issue


class JobFailure(BridgeFailure):
    """A Failure subclass, to see that its class crosses back to the caller."""


def double(x: int) -> tuple[int, int]:
    """The worker's pid and twice `x`, after a short pause so that jobs overlap."""
    time.sleep(0.2)
    return os.getpid(), 2 * x


def sleep(seconds: float) -> int:
    """Sleep, then return the worker's pid."""
    time.sleep(seconds)
    return os.getpid()


def allocate_bytes(size: int) -> int:
    """Allocate `size` bytes with Python: MemoryError past the address-space limit."""
    return len(bytearray(size))


def allocate_tensor(size: int) -> int:
    """Allocate `size` bytes with torch: its allocator raises RuntimeError past the limit."""
    return int(torch.empty(size, dtype=torch.uint8).numel())


def segfault() -> None:
    """Read address 0."""
    ctypes.string_at(0)


def fail_with_issues() -> None:
    """Raise a coded failure with issues."""
    raise JobFailure("job-refused", "refused on purpose", [Issue("bad", "/x", "bad x")])


def fail_plainly() -> None:
    """Raise an exception that is not a Failure."""
    raise ValueError("plain\nmulti-line error")


def unsendable_result() -> Callable[[], int]:
    """Return something pickle cannot send."""
    return lambda: 1


def registered(namespace: str) -> bool:
    """Whether an operator namespace has operators in this worker."""
    return any(n.startswith(namespace + "::") for n in torch._C._dispatch_get_all_op_names())


def pytree_knowledge(type_names: list[str], modules: list[str]) -> tuple[list[str], list[str]]:
    """Which of these serialized pytree type names this worker has registered, and which of
    these modules it has imported."""
    from torch.utils import _pytree as pytree

    registered = [n for n in type_names if n in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE]
    return registered, [m for m in modules if m in sys.modules]


def standin_fields(doc_json: bytes, tensors: TensorSource) -> list[str]:
    """The fields of the namedtuple torch builds for the first module call's output, here."""
    from app.bridge.exported import deserialize

    program = deserialize(schema.load(doc_json), tensors.read())
    out_spec = program.module_call_graph[0].signature
    assert out_spec is not None
    return list(out_spec.out_spec.context._fields)


def namespaces_loaded(namespaces: list[str], modules: list[str]) -> tuple[list[str], list[str]]:
    """Which of `namespaces` this worker has operators in, before and after importing `modules`."""
    import importlib

    def known() -> list[str]:
        return [n for n in namespaces if registered(n)]

    before = known()
    for module in modules:
        importlib.import_module(module)
    return before, known()
