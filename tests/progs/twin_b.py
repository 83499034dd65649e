"""The other half of a twin.

Its module body is twin_a's, character for character, but it sits in another file and on other
lines, so every node's stack trace (in the node metadata) differs from twin_a's. Canonical form
drops that metadata, so both must have one graph digest.
"""

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
