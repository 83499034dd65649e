"""Constant symbolic sizes: what torch's sympy settles, found by bounding, and never wrongly."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import sympy
from torch.utils._sympy.functions import FloorDiv

from app.programs.intervals import constant_value
from schema.models import RangeConstraint

S = "Symbol('s0', positive=True, integer=True)"
T = "Symbol('s1', positive=True, integer=True)"
#: one of the strides torch 2.13 writes for the windows program and sympy turns into 3
WINDOWS = (
    f"Min(Integer(3), Mul(Integer(3), Max(Integer(1), FloorDiv(Add({S}, Mod(Add(Integer(4), "
    f"Mul(Integer(-1), Mod({S}, Integer(4)))), Integer(4))), Integer(4)))))"
)


@pytest.mark.parametrize(
    ("text", "ranges", "expected"),
    [
        (WINDOWS, {}, 3),
        ("Integer(7)", {}, 7),
        (f"Min(Integer(3), {S})", {}, None),
        (f"Min(Integer(3), {S})", {"s0": RangeConstraint(min_val=3, max_val=None)}, 3),
        (f"Max(Integer(1), {S})", {}, None),
        (f"Max(Integer(0), Min(Integer(0), {S}))", {}, 0),
        (f"Mod(Mul(Integer(4), {S}), Integer(2))", {}, None),
        (f"FloorDiv({S}, Integer(100))", {"s0": RangeConstraint(min_val=2, max_val=99)}, 0),
        (f"Mul(Integer(0), {S})", {}, 0),
        (f"Add({S}, Mul(Integer(-1), {S}))", {}, None),
        (f"CeilToInt({S})", {}, None),
        ("s0 + 1", {}, None),
        ("Integer(", {}, None),
        (f"Pow({S}, Integer(0))", {}, None),
    ],
)
def test_constant_value(
    text: str, ranges: dict[str, RangeConstraint], expected: int | None
) -> None:
    assert constant_value(text, ranges) == expected


def test_windows_stride_is_sympys() -> None:
    """sympy (with torch's FloorDiv) simplifies the windows stride to the int we find."""
    parsed = sympy.sympify(WINDOWS, locals={"FloorDiv": FloorDiv})
    assert parsed == sympy.Integer(3)


Expr = tuple[str, Callable[[int, int], int]]


def _random_expr(rng: random.Random, depth: int) -> Expr:
    if depth == 0 or rng.random() < 0.25:
        pick = rng.randrange(3)
        if pick == 0:
            n = rng.randint(-3, 5)
            return f"Integer({n})", lambda a, b: n
        return (S, lambda a, b: a) if pick == 1 else (T, lambda a, b: b)
    kind = rng.choice(["Add", "Mul", "Min", "Max", "FloorDiv", "Mod"])
    x, fx = _random_expr(rng, depth - 1)
    if kind in ("FloorDiv", "Mod"):
        d = rng.randint(1, 4)
        if kind == "FloorDiv":
            return f"FloorDiv({x}, Integer({d}))", lambda a, b: fx(a, b) // d
        return f"Mod({x}, Integer({d}))", lambda a, b: fx(a, b) % d
    y, fy = _random_expr(rng, depth - 1)
    ops: dict[str, Callable[[int, int], int]] = {
        "Add": lambda p, q: p + q,
        "Mul": lambda p, q: p * q,
        "Min": min,
        "Max": max,
    }
    op = ops[kind]
    return f"{kind}({x}, {y})", lambda a, b: op(fx(a, b), fy(a, b))


def test_a_constant_found_is_the_value_everywhere() -> None:
    """Soundness: an expression said to be constant takes that value at every point tried."""
    rng = random.Random(0)
    found = 0
    for _ in range(3000):
        text, value = _random_expr(rng, 4)
        constant = constant_value(text, {"s1": RangeConstraint(min_val=2, max_val=9)})
        if constant is None:
            continue
        found += 1
        for a in (1, 2, 3, 7, 64, 1000):
            for b in range(2, 10):
                assert value(a, b) == constant, text
    assert found > 100
