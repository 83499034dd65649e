"""The expression and guard checker: what torch writes passes, everything else is refused."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import sympy
import torch
import torch.utils._sympy.functions as torch_sympy
import torch.utils._sympy.numbers as torch_numbers
from torch.export import Dim

from app.programs.expr import (
    MAX_DEPTH,
    MAX_LENGTH,
    UnsafeExpression,
    check_expression,
    check_guard,
    is_symbol_name,
)
from tests.zoo import PROGRAM_NAMES, torch_json

S0 = "Symbol('s0', positive=True, integer=True)"
S53 = "Symbol('s53', positive=True, integer=True)"
HALF_S0 = f"TruncToInt(Mul(Float('0.5', precision=53), ToFloat({S0})))"

#: expr_str values torch 2.13 wrote (sympy srepr) for derived dims, unbacked values,
#: interpolate and shape arithmetic, before and after run_decompositions; with their symbols.
TORCH_SREPR: list[tuple[str, set[str]]] = [
    ("Symbol('s77', positive=True, integer=True)", {"s77"}),
    ("Symbol('u0', integer=True)", {"u0"}),
    ("Add(Symbol('s77', positive=True, integer=True), Integer(1))", {"s77"}),
    ("Mul(Integer(2), Symbol('s77', positive=True, integer=True))", {"s77"}),
    ("GreaterThan(Symbol('u0', integer=True), Integer(0))", {"u0"}),
    ("LessThan(Symbol('u1', integer=True), Integer(99))", {"u1"}),
    ("StrictLessThan(Symbol('u1', integer=True), Integer(100))", {"u1"}),
    (
        "IntTrueDiv(Symbol('s77', positive=True, integer=True), "
        "Symbol('s27', positive=True, integer=True))",
        {"s27", "s77"},
    ),
    (f"Max(Integer(1), {HALF_S0})", {"s0"}),
    (
        f"Mul(Integer(2), Max(Integer(1), {HALF_S0}), Max(Integer(1), "
        f"TruncToInt(Mul(Float('0.5', precision=53), ToFloat({S53})))))",
        {"s0", "s53"},
    ),
    (f"Mul(Integer(2), {S0}, {S53})", {"s0", "s53"}),
    (f"FloorDiv(Add({S0}, Integer(1)), Integer(2))", {"s0"}),
    (f"Mod({S0}, Integer(3))", {"s0"}),
    (f"PythonMod({S0}, Integer(3))", {"s0"}),
    (f"Pow({S0}, Integer(2))", {"s0"}),
    (f"Pow({S0}, Rational(1, 2))", {"s0"}),
    (f"Min(Integer(3), {S0})", {"s0"}),
    (f"Equality({S0}, Integer(3))", {"s0"}),
    (f"Unequality({S0}, Integer(3))", {"s0"}),
    (f"And(StrictGreaterThan({S53}, Integer(2)), StrictLessThan({S0}, Integer(3)))", {"s0", "s53"}),
    (f"Not(StrictLessThan({S0}, Integer(3)))", {"s0"}),
    (f"Abs(Add({S0}, Mul(Integer(-1), {S53})))", {"s0", "s53"}),
    (
        f"Piecewise(ExprCondPair({S0}, StrictGreaterThan({S0}, Integer(3))), "
        f"ExprCondPair({S53}, true))",
        {"s0", "s53"},
    ),
    ("Float('0.5', precision=53)", set()),
    ("Rational(1, 2)", set()),
    ("-oo", set()),
    ("zoo", set()),
]
#: the str form (sympy's printer) older torch releases wrote, and range constraint keys use
SYMPY_STR: list[tuple[str, set[str]]] = [
    ("s0", {"s0"}),
    ("Min(int_oo, s0)", {"s0"}),
    ("s77 + 1", {"s77"}),
    ("2*s0", {"s0"}),
    ("s0*s1 - 7", {"s0", "s1"}),
    ("(s0//2)", {"s0"}),
    ("((s0 + 1)//2)", {"s0"}),
    ("Mod(s0, 3)", {"s0"}),
    ("s0**2", {"s0"}),
    ("sqrt(s0)", {"s0"}),
    ("Max(s0, s1)", {"s0", "s1"}),
    ("Eq(s0, 3)", {"s0"}),
    ("s0 >= s1", {"s0", "s1"}),
    ("(s1 > 2) & (s0 < 3)", {"s0", "s1"}),
    ("(s1 > 2) | (s0 < 3)", {"s0", "s1"}),
    ("~(s0 < 3)", {"s0"}),
    ("Piecewise((s0, s0 > 3), (s1, True))", {"s0", "s1"}),
    ("FloatTrueDiv(ToFloat(s0), ToFloat(s1))", {"s0", "s1"}),
    ("0.500000000000000", set()),
    ("zuf0 + u3 + r0_1", {"zuf0", "u3", "r0_1"}),
]
#: guards_code lines torch writes (ShapeGuardPythonPrinter and _unlift's input guards)
TORCH_GUARDS = [
    "L['x'].size()[1] == L['y'].size()[1]",
    "L['x'].size()[0] == ((-1) + L['y'].size()[0])",
    "L['inputs']['pair'][0].size()[0] >= 3",
    "L['x'].size()[0] <= 64",
    "L['n'] == 5",
    "L['f'] == -math.inf",
    "math.isnan(L['f'])",
    "L['mode'] == 'nearest'",
    "L['x'].stride()[0] == 2*L['x'].size()[1]",
    "L['cfg'].scale == 0.5",
    "(L['x'].size()[0] // 2 if L['x'].size()[0] > 3 else 1) == 4",
    "not (L['x'].size()[0] == 3) and torch.sym_float(L['n']) < 0.5",
    "max(2, L['x'].size()[0]) % 4 == 0 or L['x'].storage_offset() == 0",
]

REFUSED: list[tuple[str, str]] = [
    ("__import__('os').system('touch /tmp/x')", "the function '__import__' is not allowed"),
    ("eval('1')", "the function 'eval' is not allowed"),
    ("open('/etc/passwd')", "the function 'open' is not allowed"),
    ("getattr(s0, 'x')", "the function 'getattr' is not allowed"),
    ("s0.__class__", "unexpected '.'"),
    ("Symbol('s0').__class__", "unexpected '.'"),
    ("lambda: 1", "unexpected character ':'"),
    ("s0 if s0 else 1", "unexpected 'if'"),
    ("'abc'", "a string is not an expression"),
    ("s0 + 'a'", "a string operand of '+'"),
    ("s0[0]", "unexpected '['"),
    ("s0;s1", "unexpected character ';'"),
    ("s0\n+ 1", "unexpected character '\\n'"),
    ("f'{s0}'", "the name 'f' is not a symbol"),
    ("os", "the name 'os' is not a symbol"),
    ("Integer(2)(3)", "unexpected '('"),
    ("Symbol(*'s0')", "unexpected '*'"),
    ("Symbol('x')", "Symbol takes one quoted symbol name"),
    ("Symbol('s0', exec=True)", "Symbol assumption 'exec' must be a known flag"),
    ("Symbol('s0', positive=__import__('os'))", "the function '__import__' is not allowed"),
    ("Float('nan; import os')", "Float takes one quoted number"),
    ("Float('1e99999')", "a number with a huge exponent"),
    ("Float('1', precision=99999)", "a Float precision above 1024"),
    ("Integer(1" + "0" * 50 + ")", "a number with more than 40 digits"),
    ("Pow(Integer(9), Integer(99999999))", "a power above 64"),
    ("Pow(Pow(s0, 64), 2)", "a power above 64"),
    ("LShift(s0, Integer(100000))", "a power above 64"),
    ("9**9**9", "an exponent that is not a number or a symbol"),
    ("s0 < s1 < s2", "chained comparison"),
    ("", "empty"),
    ("(" * 100 + "s0" + ")" * 100, f"nested deeper than {MAX_DEPTH}"),
    ("-" * 5000 + "s0", f"nested deeper than {MAX_DEPTH}"),
    ("s0 + " * 5000 + "s0", f"longer than {MAX_LENGTH} characters"),
]
REFUSED_GUARDS: list[tuple[str, str]] = [
    ("__import__('os').system('touch /tmp/x')", "the function '__import__' is not allowed"),
    ("L['x'].__class__", "the attribute '__class__' is not allowed"),
    ("L['x'].size()[0].__class__", "unexpected '.'"),
    ("L['x'].foo()", "the call 'foo' is not allowed"),
    ("L", "the name 'L' is not allowed"),
    ("L['x'].size()[0] == exec('1')", "the function 'exec' is not allowed"),
    ("torch.load('x')", "the function 'torch.load' is not allowed"),
    ("math.inf.__class__", "the name 'math.inf.__class__' is not allowed"),
    ("(lambda: 1)()", "unexpected character ':'"),
    ("L['x'].size()[0]; import os", "unexpected character ';'"),
    ("L['x'].size()[-1] == 2", "a dimension must be an index"),
    ("L['x'].size()[0] == 2**9999", "a power above 64"),
    ("[c for c in ()]", "unexpected '['"),
]


@pytest.mark.parametrize(("text", "symbols"), TORCH_SREPR + SYMPY_STR)
def test_torch_expressions_are_accepted_with_their_symbols(text: str, symbols: set[str]) -> None:
    assert check_expression(text).symbols == symbols
    # the checker's symbols are the ones sympy finds (torch-written strings only: trusted)
    assert {str(s) for s in _sympify(text).free_symbols} == symbols


@pytest.mark.parametrize("line", TORCH_GUARDS)
def test_torch_guards_are_accepted(line: str) -> None:
    assert check_guard(line).symbols == frozenset()
    compile(line, "<guard>", "eval")


@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_foreign_expressions_are_refused(text: str, reason: str) -> None:
    with pytest.raises(UnsafeExpression) as caught:
        check_expression(text)
    assert (caught.value.code, caught.value.reason) == ("unsafe-expression", reason)


@pytest.mark.parametrize(("line", "reason"), REFUSED_GUARDS)
def test_foreign_guards_are_refused(line: str, reason: str) -> None:
    with pytest.raises(UnsafeExpression) as caught:
        check_guard(line)
    assert (caught.value.code, caught.value.reason) == ("unsafe-guards-code", reason)


def test_refusal_reports_the_offset() -> None:
    with pytest.raises(UnsafeExpression) as caught:
        check_expression("Add(s0, __import__('os'))")
    assert caught.value.position == 8
    assert "at offset 8" in caught.value.message


def test_a_very_deep_expression_is_refused_fast_without_recursion_error() -> None:
    start = time.perf_counter()
    with pytest.raises(UnsafeExpression):
        check_expression("Max(" * 4000 + "s0" + ")" * 4000)
    assert time.perf_counter() - start < 1.0


def test_symbol_names() -> None:
    accepted = ["s0", "s77", "u3", "zuf0", "zf12", "ps0", "r0_1", "idx4", "c1"]
    refused = ["s", "x", "S0", "os", "_s0", "s0.x", "0s", "exec1" + "0" * 40]
    assert [is_symbol_name(n) for n in accepted] == [True] * len(accepted)
    assert [is_symbol_name(n) for n in refused] == [False] * len(refused)


def test_every_expression_and_guard_of_the_zoo_is_accepted(zoo_json: dict[str, bytes]) -> None:
    for name in PROGRAM_NAMES:
        doc = json.loads(zoo_json[name])
        for text in _expr_strs(doc):
            check_expression(text)
        for key in doc["range_constraints"]:
            check_expression(key)
        for line in doc["guards_code"]:
            check_guard(line)


class _DerivedDim(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y[1:]


class _Unbacked(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = x.sum().int().item()
        torch._check(k >= 0)
        torch._check(k < 100)
        return torch.nonzero(x), torch.zeros(k)


class _Resize(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.interpolate(x, scale_factor=0.5, mode="nearest")
        return y.flatten(1) * (x.shape[2] / x.shape[3])


def _live_documents() -> Iterator[dict[str, Any]]:
    dx = Dim("dx", min=3, max=100)
    h, w = Dim("h", min=4, max=64), Dim("w", min=4, max=64)
    cases: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...], Any]] = [
        (_DerivedDim(), (torch.randn(5, 2), torch.randn(6, 2)), {"x": {0: dx}, "y": {0: dx + 1}}),
        (_Unbacked(), (torch.tensor([1.0, 0.0, 2.0, 3.0]),), None),
        (_Resize(), (torch.randn(1, 2, 8, 8),), {"x": {2: h, 3: w}}),
    ]
    for module, args, shapes in cases:
        ep = torch.export.export(module, args, dynamic_shapes=shapes, strict=False)
        yield json.loads(torch_json(ep))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield json.loads(torch_json(ep.run_decompositions()))


def test_live_exports_are_accepted_and_agree_with_sympy() -> None:
    seen = 0
    for doc in _live_documents():
        for text in _expr_strs(doc):
            expected = {str(s) for s in _sympify(text).free_symbols}
            assert check_expression(text).symbols == expected, text
            seen += 1
        for key in doc["range_constraints"]:
            expected = {str(s) for s in _sympify(key).free_symbols}
            assert check_expression(key).symbols == expected, key
        for line in doc["guards_code"]:
            check_guard(line)
    assert seen > 20


def _expr_strs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if isinstance(value.get("expr_str"), str):
            yield value["expr_str"]
        for item in value.values():
            yield from _expr_strs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _expr_strs(item)


def _sympify(text: str) -> Any:
    names = [n for n in dir(torch_sympy) if n[:1].isupper()]
    local = {n: getattr(torch_sympy, n) for n in names}
    return sympy.sympify(text, locals={**local, "int_oo": torch_numbers.int_oo})
