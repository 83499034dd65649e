"""A zoo of small real programs exported with torch.export: test fixtures, and bench programs."""

from __future__ import annotations

import functools
import io
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch._export.serde import serialize as torch_serde
from torch.export import Dim, ExportedProgram

CUSTOM_OP_NAMESPACE = "pt2zoo"
CUSTOM_OP_QUALNAME = f"{CUSTOM_OP_NAMESPACE}::fused_gelu"

_LEAFSPEC_DEPRECATION = "`isinstance(treespec, LeafSpec)` is deprecated"

DYNAMIC_BATCH_MIN = 2
DYNAMIC_BATCH_MAX = 64
DYNAMIC_FEAT_MIN = 3
DYNAMIC_FEAT_MAX = 32


@dataclass(frozen=True)
class ZooProgram:
    """An exported program together with example inputs to call it with."""

    name: str
    ep: ExportedProgram
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def run(self) -> Any:
        """Run the exported program's module on the example inputs, leaving ``ep`` unchanged."""
        module = self.ep.module()
        # ep.module() shares storage with ep.state_dict, so buffer mutations (BatchNorm running
        # stats) would otherwise leak into the zoo program and change its serialized bytes.
        saved = {k: v.detach().clone() for k, v in self.ep.state_dict.items()}
        try:
            return module(*self.args, **self.kwargs)
        finally:
            with torch.no_grad():
                for key, value in saved.items():
                    self.ep.state_dict[key].copy_(value)


def register_custom_ops() -> None:
    """Register the pt2zoo custom op namespace (idempotent, safe in a fresh process)."""
    if hasattr(torch.ops.pt2zoo, "fused_gelu"):
        return

    @torch.library.custom_op(CUSTOM_OP_QUALNAME, mutates_args=())
    def fused_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.nn.functional.gelu(x) * scale

    @fused_gelu.register_fake
    def _(x: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.empty_like(x)


def torch_json(ep: ExportedProgram) -> bytes:
    """Return the JSON bytes of torch's own serializer for ``ep``."""
    return torch_serde.serialize(ep).exported_program


def archive_bytes(ep: ExportedProgram) -> bytes:
    """Return the bytes of a .pt2 archive written by ``torch.export.save``."""
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    return buf.getvalue()


def outputs_close(a: Any, b: Any) -> bool:
    """Compare two nested pytree outputs for (approximate) equality."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.is_floating_point or a.dtype.is_complex:
            return torch.allclose(a, b, equal_nan=True)
        return torch.equal(a, b)
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
            return False
        return all(outputs_close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        if isinstance(a, tuple) != isinstance(b, tuple) or isinstance(a, list) != isinstance(
            b, list
        ):
            return False
        return len(a) == len(b) and all(outputs_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            return False
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-8) or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and bool(a == b)


def _export(
    name: str,
    module: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    **export_kwargs: Any,
) -> ZooProgram:
    kwargs = kwargs or {}
    ep = torch.export.export(module, args, kwargs, strict=False, **export_kwargs)
    return ZooProgram(name=name, ep=ep, args=args, kwargs=kwargs)


class LinearBN(nn.Module):
    """Linear followed by BatchNorm1d."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bn(self.linear(x))
        return out


def _linear_bn_train() -> ZooProgram:
    args = (torch.randn(6, 4),)
    ep = torch.export.export(LinearBN().train(), args, strict=False)
    # Export's training IR keeps the running-stat updates as in-place ops; an empty decomposition
    # table only functionalizes, which is what turns them into BUFFER_MUTATION outputs.
    ep = _run_decompositions(ep, {})
    return ZooProgram(name="linear_bn_train", ep=ep, args=args, kwargs={})


class SmallConv(nn.Module):
    """A tiny convolutional classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(torch.relu(self.conv(x)))
        out: torch.Tensor = self.fc(torch.flatten(y, 1))
        return out


def _conv() -> ZooProgram:
    return _export("conv", SmallConv().eval(), (torch.randn(2, 3, 8, 8),))


class DynamicMLP(nn.Module):
    """Elementwise and reduction work over a dynamic batch and feature dim."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * 2 + y).sum(dim=1, keepdim=True) - x.mean()


def _dynamic() -> ZooProgram:
    batch = Dim("batch", min=DYNAMIC_BATCH_MIN, max=DYNAMIC_BATCH_MAX)
    feat = Dim("feat", min=DYNAMIC_FEAT_MIN, max=DYNAMIC_FEAT_MAX)
    shapes = {"x": {0: batch, 1: feat}, "y": {0: batch, 1: feat}}
    args = (torch.randn(5, 7), torch.randn(5, 7))
    return _export("dynamic", DynamicMLP(), args, dynamic_shapes=shapes)


class CondModule(nn.Module):
    """Data-dependent branch via torch.cond."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def true_fn(t: torch.Tensor) -> torch.Tensor:
            hidden: torch.Tensor = self.linear(t)
            return hidden.sin()

        def false_fn(t: torch.Tensor) -> torch.Tensor:
            return t.cos() - 1

        out: torch.Tensor = torch.cond(x.sum() > 0, true_fn, false_fn, (x,))
        return out


def _cond() -> ZooProgram:
    return _export("cond", CondModule(), (torch.randn(3, 4),))


class CustomOpModule(nn.Module):
    """Calls the pt2zoo::fused_gelu custom op."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.pt2zoo.fused_gelu(self.linear(x), 0.5)
        return out


def _custom_op() -> ZooProgram:
    register_custom_ops()
    return _export("custom_op", CustomOpModule(), (torch.randn(3, 4),))


class MultiOut(nn.Module):
    """Multiple-output ops: topk and split."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values, indices = torch.topk(x, k=3, dim=1)
        first, second = torch.split(x, [2, 4], dim=1)
        return values, indices, first * 2, second + 1


def _multi_out() -> ZooProgram:
    return _export("multi_out", MultiOut(), (torch.randn(4, 6),))


class SymIntOut(nn.Module):
    """Returns a SymInt derived from a dynamic dim alongside a tensor."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        return x + 1, x.shape[0] * 2


def _symint_out() -> ZooProgram:
    shapes = {"x": {0: Dim("n", min=2, max=128)}}
    return _export("symint_out", SymIntOut(), (torch.randn(5, 3),), dynamic_shapes=shapes)


class Constants(nn.Module):
    """A lifted plain-tensor constant and a non-persistent buffer."""

    offset: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        self.register_buffer("offset", torch.full((4,), 0.25), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.table.T + self.offset[:3]


def _constants() -> ZooProgram:
    return _export("constants", Constants(), (torch.randn(2, 4),))


class PytreeModule(nn.Module):
    """Nested dict/tuple/list inputs and a dict plus tuple output."""

    def forward(
        self, inputs: dict[str, Any], extra: list[torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, list[torch.Tensor]]]:
        a, b = inputs["pair"]
        c = inputs["nested"]["list"][0]
        summed = a + b + c + extra[0]
        return {"sum": summed, "prod": a * b}, (summed.relu(), [extra[1] - c, a])


def _pytree() -> ZooProgram:
    inputs = {
        "pair": (torch.randn(2, 3), torch.randn(2, 3)),
        "nested": {"list": [torch.randn(2, 3)]},
    }
    extra = [torch.randn(2, 3), torch.randn(2, 3)]
    return _export("pytree", PytreeModule(), (inputs, extra))


class Dtypes(nn.Module):
    """bf16 parameter, int8/bool/complex64 buffers and a complex64 input."""

    codes: torch.Tensor
    mask: torch.Tensor
    phase: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, dtype=torch.bfloat16))
        self.register_buffer("codes", torch.arange(-2, 2, dtype=torch.int8))
        self.register_buffer("mask", torch.tensor([True, False, True, True]))
        self.register_buffer("phase", torch.randn(4, dtype=torch.complex64))

    def forward(
        self, x: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        scaled = (x.to(torch.bfloat16) * self.weight).masked_fill(~self.mask, 0)
        codes = (self.codes * 3).to(torch.int8)
        rotated = z * self.phase
        return scaled, codes, rotated, rotated.abs() > 1.0


def _dtypes() -> ZooProgram:
    args = (torch.randn(2, 4), torch.randn(2, 4, dtype=torch.complex64))
    return _export("dtypes", Dtypes(), args)


def _run_decompositions(
    ep: ExportedProgram, decomp_table: dict[Any, Callable[..., Any]] | None = None
) -> ExportedProgram:
    with warnings.catch_warnings():
        # torch 2.13's run_decompositions deep-copies the module call graph, and rebuilding its
        # LeafSpecs trips torch's own LeafSpec deprecation; nothing we can change from here.
        warnings.filterwarnings(
            "ignore",
            message=re.escape(_LEAFSPEC_DEPRECATION),
            category=FutureWarning,
        )
        decomposed: ExportedProgram = ep.run_decompositions(decomp_table)
        return decomposed


def _decomposed() -> ZooProgram:
    args = (torch.randn(2, 3, 8, 8),)
    ep = _run_decompositions(torch.export.export(SmallConv().eval(), args, strict=False))
    return ZooProgram(name="decomposed", ep=ep, args=args, kwargs={})


class Sub(nn.Module):
    """A small submodule taking two tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.linear(x)
        return hidden * y


class PreserveSig(nn.Module):
    """Calls the submodule ``sub`` once; its call signature is preserved at export."""

    def __init__(self) -> None:
        super().__init__()
        self.sub = Sub()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.sub(x.relu(), y)
        return out + 1


def _preserve_sig() -> ZooProgram:
    args = (torch.randn(2, 4), torch.randn(2, 4))
    return _export("preserve_sig", PreserveSig(), args, preserve_module_call_signature=("sub",))


class SharedSub(nn.Module):
    """Calls the same submodule instance twice."""

    def __init__(self) -> None:
        super().__init__()
        self.sub = Sub()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.sub(self.sub(x, y), y)
        return out


def _shared_sub() -> ZooProgram:
    args = (torch.randn(2, 4), torch.randn(2, 4))
    return _export("shared_sub", SharedSub(), args)


def _preserve_sig_shared() -> ZooProgram:
    args = (torch.randn(2, 4), torch.randn(2, 4))
    # The second call of a preserved submodule is recorded as "sub@1" in the module call graph.
    return _export(
        "preserve_sig_shared", SharedSub(), args, preserve_module_call_signature=("sub",)
    )


class ScalarFloats(nn.Module):
    """Masks with -inf and clamps, so infinite float arguments get serialized."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        masked = x.masked_fill(x < 0, float("-inf"))
        return torch.softmax(masked.clamp(max=float("inf")), dim=-1) * 0.5


def _scalar_floats() -> ZooProgram:
    x = torch.randn(3, 5)
    x[:, 0] = 1.0  # keep every row with at least one finite entry so softmax is not all-NaN
    return _export("scalar_floats", ScalarFloats(), (x,))


_BUILDERS: dict[str, Callable[[], ZooProgram]] = {
    "linear_bn_train": _linear_bn_train,
    "conv": _conv,
    "dynamic": _dynamic,
    "cond": _cond,
    "custom_op": _custom_op,
    "multi_out": _multi_out,
    "symint_out": _symint_out,
    "constants": _constants,
    "pytree": _pytree,
    "dtypes": _dtypes,
    "decomposed": _decomposed,
    "preserve_sig": _preserve_sig,
    "shared_sub": _shared_sub,
    "preserve_sig_shared": _preserve_sig_shared,
    "scalar_floats": _scalar_floats,
}

PROGRAM_NAMES: tuple[str, ...] = tuple(_BUILDERS)


def build_program(name: str) -> ZooProgram:
    """Export the single zoo program ``name`` from a fixed seed."""
    # Seed per program so each one is reproducible regardless of build order.
    torch.manual_seed(0)
    return _BUILDERS[name]()


def build_zoo() -> dict[str, ZooProgram]:
    """Export every zoo program, keyed by name; deterministic per program."""
    return {name: build_program(name) for name in PROGRAM_NAMES}


@functools.cache
def cached_zoo() -> dict[str, ZooProgram]:
    """Return one process-wide zoo build; callers must not mutate it."""
    return build_zoo()
