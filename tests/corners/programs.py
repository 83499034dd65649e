"""Programs shaped like torch's own export tests, which pt2serde was not designed around.

Each builder returns a `Corner`: one exported program of a class (unbacked sizes from `item`,
`nonzero` and `unique`; parameters and buffers the graph never reads; aliased constants and
buffers; tensor-subclass parameters and buffers; non-persistent buffers; constants reached two
ways; random module DAGs to unflatten, with preserved call signatures, some of them keyword
inputs and dict or list outputs; derived dims). `corners(seed, count)` draws a
bounded, seeded mix of them; `minimal()` gives the issue's three minimal cases.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.testing._internal.two_tensor import TwoTensor

#: every class of program the generator draws, in the order the report lists them
CLASSES: tuple[str, ...] = (
    "unbacked-item",
    "unbacked-nonzero",
    "unbacked-unique",
    "unused-weights",
    "aliased-constants",
    "aliased-buffers",
    "tensor-subclass",
    "nonpersistent-buffers",
    "constants-two-ways",
    "unflatten-dag",
    "preserved-signature",
    "derived-dims",
)


@dataclass(frozen=True)
class Corner:
    """One exported program of a class, with the inputs to call it with."""

    name: str
    klass: str
    ep: ExportedProgram
    args: tuple[Any, ...]
    #: whether the program is also compared through torch.export.unflatten
    unflatten: bool = False
    #: whether its archive holds pickled tensors (opaque payloads), refused by default
    pickled: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)


def export(
    name: str,
    klass: str,
    module: nn.Module,
    args: tuple[Any, ...],
    *,
    strict: bool,
    unflatten: bool = False,
    pickled: bool = False,
    **export_kwargs: Any,
) -> Corner:
    """Export `module` on `args` as a program of class `klass` (see `Corner`)."""
    ep = torch.export.export(module, args, strict=strict, **export_kwargs)
    mode = "strict" if strict else "nonstrict"
    return Corner(f"{name}-{mode}", klass, ep, args, unflatten, pickled)


# ---------------------------------------------------------------- unbacked sizes


class ItemView(nn.Module):
    """The issue's minimal case: an unbacked size from `.item()`, proven constant by the view."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.randn(24).view(x.item(), 4)


class ItemZeros(nn.Module):
    """An unbacked size the graph keeps, checked non-negative."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = x.item()
        torch._check(n >= 0)
        torch._check(n <= 16)
        return torch.zeros(n, self.width) + y.sum()


class ItemArange(nn.Module):
    """Two `.item()` sizes, one of them proven equal to a constant."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.tolist()
        torch._check(a == 3)
        torch._check_is_size(b)
        torch._check(b <= 10)
        return torch.arange(a * 4).float().view(a, 4).sum() + torch.ones(b).sum()


class Nonzero(nn.Module):
    """`nonzero`, whose unbacked row count is the output's first size."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).float() * self.scale


class NonzeroIndex(nn.Module):
    """`nonzero` used to index: one unbacked symbol, reached through a second."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.nonzero(x > 0.5)
        return idx, x[x > 0.5] + 1


class Unique(nn.Module):
    """`unique`, whose output size is data-dependent."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.unique(x) * 2


class UniqueCounts(nn.Module):
    """`unique` with counts and inverse."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        return values + 1, inverse, counts


# ---------------------------------------------------------------- unused and aliased weights


class ListSlice(nn.Module):
    """The issue's minimal case: a ModuleList of which forward uses only the first."""

    def __init__(self, count: int, width: int) -> None:
        super().__init__()
        self.fcs = nn.ModuleList([nn.Linear(width, width) for _ in range(count)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fcs[0](x)


class SequentialSlice(nn.Module):
    """A Sequential of which forward runs a slice."""

    def __init__(self, count: int, width: int) -> None:
        super().__init__()
        self.seq = nn.Sequential(*[nn.Linear(width, width) for _ in range(count)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.seq[: max(1, len(self.seq) - 2)](x)


class SharedLayer(nn.Module):
    """One layer under two names."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.first = nn.Linear(width, width)
        self.second = self.first
        self.other = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x)) + self.other(x)


class Holder(nn.Module):
    """A module holding a buffer and a parameter."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("buf", torch.arange(width, dtype=torch.float32))
        self.weight = nn.Parameter(torch.randn(width))


class BufferTwoPaths(nn.Module):
    """A buffer and a parameter reached through another path to the same submodule."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.holder = Holder(width)
        self.alias = self.holder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.alias.buf + self.holder.weight


class AliasedBuffers(nn.Module):
    """One tensor registered as two buffers; one of them is mutated."""

    def __init__(self, width: int) -> None:
        super().__init__()
        shared = torch.zeros(width)
        self.register_buffer("a", shared)
        self.register_buffer("b", shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.a + self.b


class AliasedConstants(nn.Module):
    """One plain tensor attribute under two names (lifted constants, not buffers)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.c1 = torch.arange(width, dtype=torch.float32)
        self.c2 = self.c1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c1 * 2 + self.c2


class AliasedConstantOneUsed(nn.Module):
    """Two names for one constant, forward reading only the second."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.c1 = torch.ones(width) * 3
        self.c2 = self.c1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.c2


class ConstantHolder(nn.Module):
    """A submodule with a plain tensor attribute."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.table = torch.linspace(0, 1, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.table


class ConstantsTwoWays(nn.Module):
    """A constant read directly and through its submodule's forward."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.inner = ConstantHolder(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * self.inner.table


class SubclassParameter(nn.Module):
    """A tensor-subclass parameter (TwoTensor), which torch.export.save pickles."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.p1 = nn.Parameter(torch.randn(width))
        self.p2 = nn.Parameter(TwoTensor(torch.randn(width), torch.randn(width)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.p1 + self.p2


class SubclassBuffer(nn.Module):
    """A tensor-subclass buffer and an unused tensor-subclass parameter (both pickled)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("b", TwoTensor(torch.randn(width), torch.randn(width)))
        self.spare = nn.Parameter(TwoTensor(torch.randn(width), torch.randn(width)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.b


class NonPersistent(nn.Module):
    """A persistent and a non-persistent buffer, the latter mutated in place."""

    def __init__(self, width: int, mutate: bool) -> None:
        super().__init__()
        self.register_buffer("kept", torch.randn(width))
        self.register_buffer("scratch", torch.zeros(width), persistent=False)
        self.mutate = mutate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mutate:
            self.scratch.add_(1)
        return x * self.kept + self.scratch


class Derived(nn.Module):
    """Inputs whose sizes are derived dims of one another (`dx + 1`, `2 * dx`)."""

    def __init__(self, scale: int) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x[1:].repeat(self.scale) + y


# ---------------------------------------------------------------- module DAGs


class Leaf(nn.Module):
    """A leaf of a random DAG: a linear layer and a buffer."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.register_buffer("shift", torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) + self.shift


class Node(nn.Module):
    """An inner node of a random DAG: calls its children in a drawn order and combines them."""

    def __init__(self, children: list[nn.Module], order: list[int], residual: bool) -> None:
        super().__init__()
        self.kids = nn.ModuleList(children)
        self.order = order
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for i in self.order:
            y = self.kids[i](y)
        return y + x if self.residual else y


class DictBlock(nn.Module):
    """A block taking a keyword argument and returning a dict holding a list, counting calls."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor, *, scale: torch.Tensor | None = None) -> dict[str, Any]:
        self.calls.add_(1)
        y = self.lin(x) if scale is None else self.lin(x) * scale
        return {"out": y, "rest": [x + 1, x - self.calls]}


class PytreeTop(nn.Module):
    """Two blocks whose signatures (a keyword input, dict and list outputs) unflatten keeps."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.first = DictBlock(width)
        self.second = DictBlock(width)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.first(x, scale=y)
        b = self.second(a["rest"][0])
        return a["out"] + b["out"], b["rest"][1]


def _dag(rng: random.Random, width: int, depth: int, pool: list[nn.Module]) -> nn.Module:
    """A random module tree whose leaves are sometimes shared (a DAG of modules)."""
    if depth == 0 or rng.random() < 0.3:
        if pool and rng.random() < 0.3:
            return rng.choice(pool)
        leaf = Leaf(width)
        pool.append(leaf)
        return leaf
    kids = [_dag(rng, width, depth - 1, pool) for _ in range(rng.randint(1, 3))]
    order = [rng.randrange(len(kids)) for _ in range(rng.randint(1, len(kids) + 1))]
    return Node(kids, order, rng.random() < 0.5)


def _inner_fqns(module: nn.Module) -> list[str]:
    named = module.named_modules(remove_duplicate=True)
    return [name for name, sub in named if name and isinstance(sub, Node)]


# ---------------------------------------------------------------- the draw


Builder = Callable[[random.Random, bool, int], Corner]


def _item(rng: random.Random, strict: bool, i: int) -> Corner:
    kind = rng.randrange(3)
    if kind == 0:
        return export(
            f"item-view-{i}", "unbacked-item", ItemView(), (torch.tensor(6),), strict=strict
        )
    if kind == 1:
        width = rng.randint(1, 5)
        args = (torch.tensor(rng.randint(1, 8)), torch.randn(3))
        return export(f"item-zeros-{i}", "unbacked-item", ItemZeros(width), args, strict=strict)
    return export(
        f"item-tolist-{i}",
        "unbacked-item",
        ItemArange(),
        (torch.tensor([3, rng.randint(1, 9)]),),
        strict=strict,
    )


def _nonzero(rng: random.Random, strict: bool, i: int) -> Corner:
    rows, cols = rng.randint(2, 6), rng.randint(2, 6)
    x = torch.randn(rows, cols)
    if rng.random() < 0.5:
        return export(
            f"nonzero-{i}", "unbacked-nonzero", Nonzero(rng.uniform(0.5, 2)), (x,), strict=strict
        )
    return export(f"nonzero-index-{i}", "unbacked-nonzero", NonzeroIndex(), (x,), strict=strict)


def _unique(rng: random.Random, strict: bool, i: int) -> Corner:
    x = torch.randint(0, 5, (rng.randint(4, 12),))
    module: nn.Module = Unique() if rng.random() < 0.5 else UniqueCounts()
    return export(f"unique-{i}", "unbacked-unique", module, (x,), strict=strict)


def _unused(rng: random.Random, strict: bool, i: int) -> Corner:
    width = rng.randint(1, 4)
    x = torch.randn(2, width)
    kind = rng.randrange(4)
    module: nn.Module
    if kind == 0:
        module = ListSlice(rng.randint(2, 4), width)
    elif kind == 1:
        module = SequentialSlice(rng.randint(3, 5), width)
    elif kind == 2:
        module = SharedLayer(width)
    else:
        module = BufferTwoPaths(width)
    return export(f"unused-{kind}-{i}", "unused-weights", module, (x,), strict=strict)


def _aliased_constants(rng: random.Random, strict: bool, i: int) -> Corner:
    width = rng.randint(1, 5)
    module: nn.Module = (
        AliasedConstants(width) if rng.random() < 0.5 else AliasedConstantOneUsed(width)
    )
    return export(
        f"alias-const-{i}", "aliased-constants", module, (torch.randn(width),), strict=strict
    )


def _aliased_buffers(rng: random.Random, strict: bool, i: int) -> Corner:
    width = rng.randint(1, 5)
    return export(
        f"alias-buf-{i}",
        "aliased-buffers",
        AliasedBuffers(width),
        (torch.randn(width),),
        strict=strict,
    )


def _subclass(rng: random.Random, strict: bool, i: int) -> Corner:
    width = rng.randint(1, 5)
    module = SubclassParameter(width) if rng.random() < 0.5 else SubclassBuffer(width)
    args = (torch.randn(width),)
    return export(f"subclass-{i}", "tensor-subclass", module, args, strict=strict, pickled=True)


def _derived(rng: random.Random, strict: bool, i: int) -> Corner:
    scale = rng.randint(1, 3)
    n = rng.randint(2, 6)
    dx = torch.export.Dim(f"dx{i}", min=2, max=32)
    args = (torch.randn(n + 1), torch.randn(scale * n))
    shapes = ({0: dx + 1}, {0: scale * dx})
    module = Derived(scale)
    return export(
        f"derived-{i}", "derived-dims", module, args, strict=strict, dynamic_shapes=shapes
    )


def _nonpersistent(rng: random.Random, strict: bool, i: int) -> Corner:
    width = rng.randint(1, 5)
    module = NonPersistent(width, rng.random() < 0.5)
    return export(
        f"nonpersistent-{i}", "nonpersistent-buffers", module, (torch.randn(width),), strict=strict
    )


def _two_ways(rng: random.Random, strict: bool, i: int) -> Corner:
    width = rng.randint(1, 5)
    return export(
        f"two-ways-{i}",
        "constants-two-ways",
        ConstantsTwoWays(width),
        (torch.randn(width),),
        strict=strict,
    )


def _unflatten(rng: random.Random, strict: bool, i: int) -> Corner:
    width = rng.randint(2, 4)
    module = _dag(rng, width, rng.randint(2, 3), [])
    return export(
        f"dag-{i}", "unflatten-dag", module, (torch.randn(2, width),), strict=strict, unflatten=True
    )


def preserved(rng: random.Random, strict: bool, i: int) -> Corner:
    """A random module DAG, or blocks with pytree signatures, some of them preserved."""
    width = rng.randint(2, 4)
    x = torch.randn(2, width)
    if rng.random() < 0.5:
        kept = tuple(sorted(rng.sample(["first", "second"], rng.randint(1, 2))))
        module: nn.Module = PytreeTop(width)
        args: tuple[Any, ...] = (x, torch.randn(2, width))
    else:
        module = _dag(rng, width, 3, [])
        inner = _inner_fqns(module)
        kept = tuple(sorted(rng.sample(inner, min(len(inner), rng.randint(1, 2))))) if inner else ()
        args = (x,)
    return export(
        f"preserved-{i}",
        "preserved-signature",
        module,
        args,
        strict=strict,
        unflatten=True,
        preserve_module_call_signature=kept,
    )


_BUILDERS: dict[str, Builder] = {
    "unbacked-item": _item,
    "unbacked-nonzero": _nonzero,
    "unbacked-unique": _unique,
    "unused-weights": _unused,
    "aliased-constants": _aliased_constants,
    "aliased-buffers": _aliased_buffers,
    "tensor-subclass": _subclass,
    "nonpersistent-buffers": _nonpersistent,
    "constants-two-ways": _two_ways,
    "unflatten-dag": _unflatten,
    "preserved-signature": preserved,
    "derived-dims": _derived,
}


@dataclass(frozen=True)
class Skipped:
    """A drawn program torch itself cannot export (not counted against us)."""

    name: str
    klass: str
    reason: str


def corners(seed: int, count: int) -> list[Corner | Skipped]:
    """`count` programs drawn from `seed`: every class in turn, strict and non-strict alike."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    drawn: list[Corner | Skipped] = []
    for i in range(count):
        klass = CLASSES[i % len(CLASSES)]
        strict = (i // len(CLASSES)) % 2 == 0
        try:
            drawn.append(_BUILDERS[klass](rng, strict, i))
        except Exception as exc:  # torch's export refusing is a fact to note, not our failure
            mode = "strict" if strict else "nonstrict"
            why = f"export: {type(exc).__name__}: {str(exc)[:120]}"
            drawn.append(Skipped(f"{klass}-{i}-{mode}", klass, why))
    return drawn


def minimal() -> dict[str, Corner]:
    """The issue's three minimal cases (plus the strict nonzero one it names)."""
    torch.manual_seed(0)
    return {
        "item-view": export(
            "item-view", "unbacked-item", ItemView(), (torch.tensor(6),), strict=False
        ),
        "nonzero": export(
            "nonzero", "unbacked-nonzero", NonzeroIndex(), (torch.randn(4, 3),), strict=True
        ),
        "module-list": export(
            "module-list", "unused-weights", ListSlice(2, 1), (torch.randn(2, 1),), strict=True
        ),
        "subclass": export(
            "subclass",
            "tensor-subclass",
            SubclassParameter(3),
            (torch.randn(3),),
            strict=False,
            pickled=True,
        ),
    }
