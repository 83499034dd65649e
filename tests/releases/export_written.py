"""Export the programs of `tests/data/release_programs/` in the running torch release.

Run by path in a release venv (torch only): `<venv>/bin/python tests/releases/export_written.py
<out dir>`. Each program uses what its release reads and another does not: 2.6.0 `torch.cond`
(its one result an untagged list), 2.13.0 `aten::qr` and `aten::cholesky` (removed in 2.14), 2.14.1
`aten::linalg_polar` and `linalg_matrix_sqrth` (new in 2.14), 2.15.0 `aten::_philox_randint`
(new in 2.15) and the `torch.return_types.linalg_polar` pytree type (registered from 2.15).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


class QrCholesky(torch.nn.Module):
    """`torch.qr` and `torch.cholesky`, which torch 2.14 no longer registers."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, r = torch.ops.aten.qr.default(x)
        spd = x @ x.mT + torch.eye(x.shape[-1])
        return q + r, torch.ops.aten.cholesky.default(spd)


class Polar(torch.nn.Module):
    """The polar decomposition and the Hermitian square root, new in torch 2.14."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u, h = torch.ops.aten.linalg_polar.default(x)
        spd = x @ x.mT + torch.eye(x.shape[-1])
        return u @ h, torch.ops.aten.linalg_matrix_sqrth.default(spd)


class PhiloxRandint(torch.nn.Module):
    """Counter-based random integers, new in torch 2.15."""

    def forward(self, x: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._philox_randint.default(x, key, 0, 10) + x


class Cond(torch.nn.Module):
    """`torch.cond` with one result, which torch 2.6 writes as an untagged list."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))
        return out


class PolarNamedTuple(torch.nn.Module):
    """The polar decomposition returned as torch's namedtuple, a pytree type new in 2.15."""

    def forward(self, x: torch.Tensor) -> Any:
        return torch.linalg.polar(x)


Inputs = Callable[[], tuple[torch.Tensor, ...]]
PROGRAMS: dict[str, list[tuple[str, type[torch.nn.Module], Inputs]]] = {
    "2.6": [("cond", Cond, lambda: (torch.randn(3),))],
    "2.13": [("qr_cholesky", QrCholesky, lambda: (torch.randn(3, 3),))],
    "2.14": [("linalg_polar", Polar, lambda: (torch.randn(3, 3),))],
    "2.15": [
        (
            "philox_randint",
            PhiloxRandint,
            lambda: (torch.zeros(4, dtype=torch.int64), torch.zeros(2, dtype=torch.uint64)),
        ),
        ("polar_namedtuple", PolarNamedTuple, lambda: (torch.randn(3, 3),)),
    ],
}


def main(out: Path) -> None:
    """Export this release's programs into `out/torch-<release>-<name>.pt2`."""
    torch.manual_seed(0)
    release = torch.__version__.split("+")[0]
    for name, module, inputs in PROGRAMS[".".join(release.split(".")[:2])]:
        exported = torch.export.export(module(), inputs())
        torch.export.save(exported, str(out / f"torch-{release}-{name}.pt2"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
