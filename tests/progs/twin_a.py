"""One half of a twin: the same module body as twin_b, defined in another file and line."""

from __future__ import annotations

import torch
from torch import nn


class Twin(nn.Module):
    """Linear, a buffer and an activation: enough nodes for stack traces to matter."""

    shift: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.register_buffer("shift", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.linear(x))
        return hidden * 2 + self.shift
