"""Raw tensors without torch: element sizes, view geometry, storage checks, contiguous bytes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, get_args

import numpy as np

from app.archive.raw import RawTensor, TensorKind
from app.archive.tensors import dtype_name
from app.failure import BridgeFailure
from schema import Issue, Layout, SymIntAsExpr, SymIntAsInt, TensorMeta
from schema.dtypes import ITEMSIZE
from schema.errors import pointer

KINDS: frozenset[str] = frozenset(get_args(TensorKind))


@dataclass(frozen=True)
class MappedTensor:
    """A tensor whose storage is a writable view of a privately mapped archive: torch builds on
    it without a copy, and writes to it never reach the file."""

    name: str
    kind: TensorKind
    meta: TensorMeta
    data: memoryview
    #: never: pickled payloads are read, not mapped (the field keeps `Stored` alike)
    pickled: bool = False


#: A tensor as torch is handed it: storage bytes read into memory, or mapped from the archive.
Stored = RawTensor | MappedTensor
_T = TypeVar("_T", bound=Stored)


@dataclass(frozen=True)
class View:
    """The concrete geometry of a strided tensor over its storage, in elements."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    itemsize: int

    @property
    def numel(self) -> int:
        """Number of elements the view covers."""
        n = 1
        for size in self.sizes:
            n *= size
        return n

    @property
    def extent(self) -> int:
        """Elements of storage the view needs: one past its furthest element (0 when empty)."""
        if self.numel == 0:
            return 0
        return (
            self.offset
            + sum((s - 1) * st for s, st in zip(self.sizes, self.strides, strict=True))
            + 1
        )

    def is_contiguous(self) -> bool:
        """Whether the view reads its storage row-major, without gaps, from element 0."""
        expected = 1
        for size, stride in zip(reversed(self.sizes), reversed(self.strides), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return self.offset == 0 or self.numel == 0


def concrete(value: SymIntAsExpr | SymIntAsInt) -> int | None:
    """The int of a SymInt, or None when it is symbolic."""
    return value.as_int if isinstance(value, SymIntAsInt) else None


def shape_of(meta: TensorMeta) -> list[int | str]:
    """The sizes of a meta, symbolic ones as their expression text (for messages and checks)."""
    return [s.as_int if isinstance(s, SymIntAsInt) else s.as_expr.expr_str for s in meta.sizes]


def view_of(name: str, meta: TensorMeta) -> tuple[View | None, list[Issue]]:
    """The view a tensor's meta describes, or the issues that keep it from having one."""
    path = pointer([name])
    issues: list[Issue] = []
    itemsize = ITEMSIZE.get(meta.dtype)
    if itemsize is None:
        issues.append(
            Issue(
                "tensor-dtype-unsupported", path, f"dtype {dtype_name(meta.dtype)} has no storage"
            )
        )
    if meta.layout != Layout.Strided:
        issues.append(
            Issue("tensor-layout-unsupported", path, f"layout {meta.layout.name} is not strided")
        )
    sizes = [concrete(s) for s in meta.sizes]
    strides = [concrete(s) for s in meta.strides]
    offset = concrete(meta.storage_offset)
    if None in sizes or None in strides or offset is None:
        issues.append(
            Issue(
                "tensor-symbolic", path, "a stored tensor needs concrete sizes, strides and offset"
            )
        )
    elif len(sizes) != len(strides):
        issues.append(
            Issue("tensor-bad-strides", path, f"{len(sizes)} sizes but {len(strides)} strides")
        )
    elif any(v < 0 for v in (*sizes, *strides, offset)):  # type: ignore[operator]
        issues.append(Issue("tensor-bad-strides", path, "sizes, strides and offset must be >= 0"))
    if issues or itemsize is None or offset is None:
        return None, issues
    return View(tuple(sizes), tuple(strides), offset, itemsize), []  # type: ignore[arg-type]


def storage_issues(name: str, meta: TensorMeta, size: int) -> tuple[View | None, list[Issue]]:
    """The view of a tensor once `size` bytes of storage are checked to hold it, else the issues."""
    view, issues = view_of(name, meta)
    if view is None:
        return None, issues
    path = pointer([name])
    if size % view.itemsize:
        return None, [
            Issue(
                "tensor-data-misaligned",
                path,
                f"{size} bytes is not a whole number of {view.itemsize}-byte elements",
            )
        ]
    if view.extent > size // view.itemsize:
        return None, [
            Issue(
                "tensor-data-short",
                path,
                f"the view needs {view.extent} elements, the data holds {size // view.itemsize}",
            )
        ]
    return view, []


def checked_views(tensors: Iterable[Stored]) -> dict[str, View]:
    """Every raw tensor's view (pickled payloads have none); BridgeFailure `tensor-data-invalid`
    lists each tensor that has none."""
    return checked_sizes((t.name, t.meta, len(t.data)) for t in tensors if not t.pickled)


def checked_sizes(tensors: Iterable[tuple[str, TensorMeta, int]]) -> dict[str, View]:
    """`checked_views` of tensors given as (name, meta, storage size), before any byte is read."""
    views: dict[str, View] = {}
    issues: list[Issue] = []
    for name, meta, size in tensors:
        view, problems = storage_issues(name, meta, size)
        issues.extend(problems)
        if view is not None:
            views[name] = view
    if issues:
        raise BridgeFailure(
            "tensor-data-invalid",
            f"{len(issues)} tensor(s) cannot be read from their bytes",
            issues,
        )
    return views


def contiguous_bytes(raw: RawTensor, view: View) -> bytes:
    """The view's elements row-major and packed; the data itself when it already is exactly that."""
    nbytes = view.numel * view.itemsize
    if view.is_contiguous() and len(raw.data) == nbytes:
        return raw.data
    if nbytes == 0:
        return b""
    storage = np.frombuffer(raw.data, dtype=np.uint8)
    # A trailing byte axis copies every dtype alike (bf16, complex, fp8) without decoding them.
    elements = np.lib.stride_tricks.as_strided(
        storage[view.offset * view.itemsize :],
        shape=(*view.sizes, view.itemsize),
        strides=(*(st * view.itemsize for st in view.strides), 1),
        writeable=False,
    )
    return elements.tobytes()


def contiguous_meta(meta: TensorMeta, sizes: Sequence[int]) -> TensorMeta:
    """A meta for packed row-major storage of `sizes`, keeping dtype, device and requires_grad."""
    strides: list[int] = []
    step = 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return TensorMeta(
        dtype=meta.dtype,
        sizes=[SymIntAsInt(as_int=s) for s in sizes],
        requires_grad=meta.requires_grad,
        device=meta.device,
        strides=[SymIntAsInt(as_int=s) for s in reversed(strides)],
        storage_offset=SymIntAsInt(as_int=0),
        layout=Layout.Strided,
    )


def by_name(tensors: Mapping[str, _T] | Iterable[_T]) -> dict[str, _T]:
    """Tensors keyed by their name, from a mapping or any iterable of raw tensors."""
    if isinstance(tensors, Mapping):
        return dict(tensors)
    return {t.name: t for t in tensors}
