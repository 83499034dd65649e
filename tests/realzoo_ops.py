"""The real zoo's custom operator, imported by torch workers (settings.worker_imports).

Kept apart from tests.realzoo on purpose: a worker that imports this module must still not know
the zoo's namedtuple and dataclass types, which the service is meant to handle without them.
"""

from __future__ import annotations

import torch

NAMESPACE = "pt2real"
QUALNAME = f"{NAMESPACE}::scaled_split"


def register_real_ops() -> None:
    """Register pt2real::scaled_split and pt2real::accumulate (idempotent)."""
    if hasattr(torch.ops.pt2real, "scaled_split"):
        return

    # An optional tensor, an int list, a defaulted float and two returns: more of the operator
    # schema language than a one-tensor op exercises.
    @torch.library.custom_op(QUALNAME, mutates_args=())
    def scaled_split(
        x: torch.Tensor, bias: torch.Tensor | None, sizes: list[int], alpha: float = 0.5
    ) -> tuple[torch.Tensor, torch.Tensor]:
        shifted = x if bias is None else x + bias
        head, tail = torch.split(shifted * alpha, sizes, dim=-1)
        return head.clone(), torch.tanh(tail)

    @scaled_split.register_fake
    def _(
        x: torch.Tensor, bias: torch.Tensor | None, sizes: list[int], alpha: float = 0.5
    ) -> tuple[torch.Tensor, torch.Tensor]:
        head, tail = torch.split(x, sizes, dim=-1)
        return torch.empty_like(head), torch.empty_like(tail)

    # An operator that writes into two of its inputs: export wraps its calls in
    # auto_functionalized_v2 and copies the results back into the mutated inputs and buffers.
    @torch.library.custom_op(f"{NAMESPACE}::accumulate", mutates_args=("total", "count"))
    def accumulate(total: torch.Tensor, count: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        total.add_(x)
        count.add_(1)
        return x * 2

    @accumulate.register_fake
    def _(total: torch.Tensor, count: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)


register_real_ops()
