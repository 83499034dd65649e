"""Export the release matrix's programs with the torch of the interpreter running this file.

Run as a script by each release's own venv (`<venv>/bin/python -I export_programs.py OUT`), so it
imports only the standard library and torch. It saves `OUT/<program>.pt2` with
`torch.export.save`, the sample inputs as `OUT/<program>.inputs.pt`, and `OUT/manifest.json`
saying which programs were saved, which this release cannot express (skipped, naming the missing
operator) and which failed to export.
"""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

Inputs = tuple[Any, ...]


@dataclass(frozen=True)
class Program:
    """One program: the operator overloads it needs, and how to build the module and inputs."""

    name: str
    needs: tuple[str, ...]
    build: Callable[[], tuple[nn.Module, Inputs, Any]]


def _overload(qualified: str) -> Any:
    """`aten::qr.default` as torch's OpOverload, or None where this release lacks it."""
    name, overload = qualified.split("::", 1)[1].split(".", 1)
    try:
        packet = getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None
    return getattr(packet, overload) if overload in packet.overloads() else None


def _call(qualified: str, *args: Any) -> Any:
    return _overload(qualified)(*args)


def _linalg(name: str) -> Callable[..., Any]:
    # torch.linalg functions newer than the pinned torch the type checker reads
    fn: Callable[..., Any] = getattr(torch.linalg, name)
    return fn


def _spd(x: torch.Tensor) -> torch.Tensor:
    # symmetric positive definite, so that cholesky and the Hermitian square root are defined
    return x @ x.mT + 4 * torch.eye(x.shape[-1])


class _Apply(nn.Module):
    """A parameterless module whose forward is one function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        """The function, applied."""
        return self.fn(*args)


class _ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class _Cond(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))


class _SizeOut(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        return x * 2, x.shape[0]


class _Item(nn.Module):
    # the minimal case: the unbacked u0 is proven constant and leaves the graph
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.randn(24).view(cast(int, x.item()), 4)


# torch._check carries no type annotations
_check: Callable[[bool], None] = torch._check


class _CheckedItem(nn.Module):
    # the same with the size checked non-negative: releases before 2.8 cannot export it otherwise,
    # and u0 stays in the graph
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = cast(int, x.item())
        _check(size >= 0)
        return torch.randn(24).view(size, 4)


def _batch(low: int) -> Any:
    return torch.export.Dim("batch", min=low, max=64)


def _linear() -> tuple[nn.Module, Inputs, Any]:
    return nn.Linear(4, 3), (torch.randn(2, 4),), None


def _conv_bn() -> tuple[nn.Module, Inputs, Any]:
    return _ConvBn().eval(), (torch.randn(1, 3, 8, 8),), None


def _dynamic() -> tuple[nn.Module, Inputs, Any]:
    return nn.Linear(4, 3), (torch.randn(5, 4),), ({0: _batch(2)},)


def _cond() -> tuple[nn.Module, Inputs, Any]:
    return _Cond(), (torch.randn(3),), None


def _symint() -> tuple[nn.Module, Inputs, Any]:
    return _SizeOut(), (torch.randn(5, 3),), ({0: _batch(2)},)


def _item() -> tuple[nn.Module, Inputs, Any]:
    return _Item(), (torch.tensor(6),), None


def _checked_item() -> tuple[nn.Module, Inputs, Any]:
    return _CheckedItem(), (torch.tensor(6),), None


def _qr_cholesky() -> tuple[nn.Module, Inputs, Any]:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, r = _call("aten::qr.default", x)
        return q, r, _call("aten::cholesky.default", _spd(x))

    return _Apply(fn), (torch.randn(4, 4),), None


def _linalg_qr_cholesky() -> tuple[nn.Module, Inputs, Any]:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, r = torch.linalg.qr(x)
        return q, r, torch.linalg.cholesky(_spd(x))

    return _Apply(fn), (torch.randn(4, 4),), None


def _linalg_polar() -> tuple[nn.Module, Inputs, Any]:
    # torch.linalg.polar (2.14+) exports as aten.linalg_polar.default; a plain tuple out, as
    # torch 2.14.1 cannot save the named tuple it returns (see the next program)
    return _Apply(lambda x: tuple(_linalg("polar")(x))), (torch.randn(4, 4),), None


def _polar_named() -> tuple[nn.Module, Inputs, Any]:
    # the named tuple itself: the output spec names torch.return_types.linalg_polar
    return _Apply(lambda x: _linalg("polar")(x)), (torch.randn(4, 4),), None


def _matrix_sqrth() -> tuple[nn.Module, Inputs, Any]:
    return _Apply(lambda x: _linalg("matrix_sqrth")(_spd(x))), (torch.randn(4, 4),), None


def _key() -> torch.Tensor:
    return torch.tensor([1, 2], dtype=torch.uint64)


def _fold_in() -> tuple[nn.Module, Inputs, Any]:
    # the Tensor overload is the 2.14 one (2.13 has only `_philox_key_fold_in(Tensor, int)`)
    def fn(key: torch.Tensor, data: torch.Tensor) -> Any:
        return _call("aten::_philox_key_fold_in.Tensor", key, data)

    return _Apply(fn), (_key(), torch.tensor(3, dtype=torch.uint64)), None


def _scaled_addmm() -> tuple[nn.Module, Inputs, Any]:
    # tensorwise fp8 scaling (recipe 0); the operator has no CPU kernel, so it exports and loads
    # on CPU but does not run
    def fn(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Any:
        one = torch.ones((), dtype=torch.float32)
        return _call("aten::_scaled_addmm.default", bias, a, b, [one], [0], [0], [one], [0], [0])

    fp8 = torch.float8_e4m3fn
    mats = (torch.randn(4, 16).to(fp8), torch.randn(8, 16).to(fp8).t())
    return _Apply(fn), (torch.randn(4, 8), *mats), None


def _vmap() -> tuple[nn.Module, Inputs, Any]:
    # from 2.9, export keeps torch.vmap as calls of plain Python functions
    # (torch._functorch.predispatch: lazy_load_decompositions, _add_batch_dim, ...), which only
    # readers with a branch for callable targets (2.13+) load
    def fn(x: torch.Tensor) -> Any:
        return torch.vmap(lambda row: row.sin() * 2)(x)

    return _Apply(fn), (torch.randn(3, 4),), None


def _randint() -> tuple[nn.Module, Inputs, Any]:
    def fn(shape: torch.Tensor, key: torch.Tensor) -> Any:
        return _call("aten::_philox_randint.default", shape, key, 0, 10)

    return _Apply(fn), (torch.empty(4, dtype=torch.int64), _key()), None


PROGRAMS = (
    Program("linear", (), _linear),
    Program("conv_bn", (), _conv_bn),
    Program("dynamic_dim", (), _dynamic),
    Program("cond", (), _cond),
    Program("symint_output", (), _symint),
    Program("unbacked_item", (), _item),
    Program("unbacked_item_checked", (), _checked_item),
    Program("linalg_qr_cholesky", (), _linalg_qr_cholesky),
    Program("qr_cholesky", ("aten::qr.default", "aten::cholesky.default"), _qr_cholesky),
    Program("linalg_polar", ("aten::linalg_polar.default",), _linalg_polar),
    Program("linalg_polar_namedtuple", ("aten::linalg_polar.default",), _polar_named),
    Program("linalg_matrix_sqrth", ("aten::linalg_matrix_sqrth.default",), _matrix_sqrth),
    Program("philox_key_fold_in", ("aten::_philox_key_fold_in.Tensor",), _fold_in),
    Program("scaled_addmm", ("aten::_scaled_addmm.default",), _scaled_addmm),
    Program("philox_randint", ("aten::_philox_randint.default",), _randint),
    Program("vmap", (), _vmap),
)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def export_one(program: Program, out: Path) -> dict[str, str]:
    """Export and save one program; its manifest entry."""
    missing = [op for op in program.needs if _overload(op) is None]
    if missing:
        return {"status": "skipped", "detail": f"torch {torch.__version__} has no {missing[0]}"}
    torch.manual_seed(0)
    try:
        module, inputs, dynamic = program.build()
        exported = torch.export.export(module, inputs, dynamic_shapes=dynamic, strict=False)
        torch.export.save(exported, out / f"{program.name}.pt2")
        torch.save(inputs, out / f"{program.name}.inputs.pt")
    except Exception as exc:  # a release that cannot export it: recorded, not fatal
        traceback.print_exc()
        return {"status": "failed", "detail": _first_line(exc)}
    return {"status": "saved", "detail": ""}


def main(argv: list[str]) -> int:
    """Export every program into argv[0]; the manifest names this script's digest."""
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    programs: dict[str, dict[str, str]] = {}
    for program in PROGRAMS:
        programs[program.name] = export_one(program, out)
        print(
            f"{torch.__version__} {program.name}: {programs[program.name]['status']}",
            file=sys.stderr,
            flush=True,
        )
    manifest = {"torch": torch.__version__, "script": digest, "programs": programs}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
