"""The expression checker's bounds follow sympy's cost, not the text's size: the long sizes with
repeated subterms and many two-argument Min calls that real (Swin-style) exports write pass,
while texts that make sympy compare or combine many distinct terms are refused."""

from __future__ import annotations

import itertools
import time

import pytest
import sympy
import torch.utils._sympy.functions as torch_sympy

from app.programs.expr import UnsafeExpression, check_expression
from app.programs.expr_grammar import MAX_ARGUMENTS, MAX_MINMAX_PAIRS, MAX_OPERANDS, TOKEN


def _symbol(i: int) -> str:
    return f"Symbol('s{i}', positive=True, integer=True)"


def _halved(inner: str) -> str:
    """One Swin-style stage, pad to even and halve, in torch's srepr form."""
    return f"FloorDiv(Add({inner}, Mod({inner}, Integer(2)), Integer(1)), Integer(2))"


def _swin_like(stages: int) -> str:
    size = _symbol(0)
    for _ in range(stages):
        size = f"Min({_symbol(1)}, {_halved(size)})"
    return size


def _sympify(text: str) -> float:
    """sympy's CPU seconds to read `text` as torch's deserializer does."""
    names = ("FloorDiv", "Mod", "CeilDiv", "PythonMod")
    functions = {name: getattr(torch_sympy, name) for name in names}
    sympy.core.cache.clear_cache()
    start = time.process_time()
    sympy.sympify(text, locals=functions)
    return time.process_time() - start


def test_long_sizes_with_repeated_subterms_pass() -> None:
    text = _swin_like(5)
    operands = [m for m in TOKEN.finditer(text) if m.lastgroup in ("num", "name")]
    assert len(operands) > MAX_OPERANDS  # in all, as the checker once counted them
    assert text.count("Min(") * 2 > 32  # Min arguments in all, as it once counted them
    assert check_expression(text).symbols == {"s0", "s1"}
    assert _sympify(text) < 2


def _minmax(name: str, count: int, start: int = 0) -> str:
    return f"{name}({', '.join(f's{i}' for i in range(start, start + count))})"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (_minmax("Max", 33), f"more than {MAX_MINMAX_PAIRS} pairs of Max and Min arguments"),
        # sympy flattens the nested calls into one Max of 40
        (
            f"Max({_minmax('Max', 20)}, {_minmax('Max', 20, 20)})",
            f"more than {MAX_MINMAX_PAIRS} pairs",
        ),
        (
            "Add(" + ", ".join(_minmax("Min", 8, 8 * i) for i in range(18)) + ")",
            f"more than {MAX_MINMAX_PAIRS} pairs",
        ),
        (" + ".join(f"s{i}" for i in range(MAX_ARGUMENTS + 1)), "a chain of more than"),
        (" * ".join(f"s{i % 3}" for i in range(MAX_ARGUMENTS + 1)), "a chain of more than"),
        (
            "Add(" + ", ".join(_minmax("Add", 60, 60 * i) for i in range(5)) + ")",
            f"more than {MAX_OPERANDS} distinct operands",
        ),
    ],
)
def test_costly_texts_are_refused(text: str, reason: str) -> None:
    with pytest.raises(UnsafeExpression) as caught:
        check_expression(text)
    assert reason in caught.value.reason


def test_what_the_bounds_let_through_is_cheap_for_sympy() -> None:
    products = [f"s{i}*s{j}*s{k}" for i, j, k in itertools.combinations(range(12), 3)]
    chains = " * ".join("(" + " + ".join(products[i : i + 60]) + ")" for i in range(0, 180, 60))
    pairs = "Add(" + ", ".join(f"Max(s{i}, s{i + 1})" for i in range(60)) + ")"
    widest = _minmax("Max", 32)
    for text in (chains, pairs, widest):
        check_expression(text)
        assert _sympify(text) < 2, text[:80]
