"""The range of values a symbolic size can take, to know the ones that are constant.

torch's loader parses every size and stride expression with sympy, whose constructors simplify
what they can prove from the symbols' assumptions (``Min(3, 3*Max(1, x))`` is ``3`` for any
positive ``x``), and its serializer writes an expression that became a number as an int. So
an expression written at export may come back from ``torch.export.load`` + ``torch.export.save``
as the int it always equals. Bounding each expression over the symbols' ranges (their
assumptions and the program's range constraints) finds those: an expression whose lowest and
highest values agree is that int, whatever torch's simplifier managed.

Only sympy's ``srepr`` form (``Add(Symbol('s0', positive=True, integer=True), Integer(1))``),
which torch writes for sizes, is read; anything else, or any function not listed here, is
unbounded, and nothing is evaluated but integer arithmetic on the bounds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.programs.expr_grammar import MAX_DEPTH, MAX_LENGTH
from schema.models import RangeConstraint

__all__ = ["Bounds", "constant_value"]

#: an endpoint: an int, or -inf/inf for an unbounded side
_End = int | float
_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z_0-9]*)|(-?[0-9]+)|('[^']*')|([(),=]))")


@dataclass(frozen=True)
class Bounds:
    """The lowest and highest value an expression takes (inclusive; infinite when unbounded)."""

    lo: _End
    hi: _End


_ANY = Bounds(-math.inf, math.inf)


class _Unreadable(Exception):
    """Text outside the srepr subset read here."""


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[_Node, ...]
    keywords: tuple[tuple[str, str], ...]


_Node = _Call | int | str


def constant_value(text: str, ranges: Mapping[str, RangeConstraint]) -> int | None:
    """The int the expression always equals over the symbols' ranges, None when it varies
    (or is not read here)."""
    if len(text) > MAX_LENGTH:
        return None
    try:
        tree = _Parser(text).parse()
        bounds = _bounds(tree, ranges)
    except _Unreadable:
        return None
    if bounds.lo == bounds.hi and isinstance(bounds.lo, int):
        return bounds.lo
    return None


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise _Unreadable
            self.tokens.append(match.group(match.lastindex or 0))
            pos = match.end()
        self.at = 0

    def parse(self) -> _Node:
        node = self._node(0)
        if self.at != len(self.tokens):
            raise _Unreadable
        return node

    def _next(self) -> str:
        if self.at >= len(self.tokens):
            raise _Unreadable
        token = self.tokens[self.at]
        self.at += 1
        return token

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _node(self, depth: int) -> _Node:
        if depth > MAX_DEPTH:
            raise _Unreadable
        token = self._next()
        if token.startswith("'"):
            return token[1:-1]
        if token.lstrip("-").isdigit():
            return int(token)
        if not (token[0].isalpha() or token[0] == "_") or self._next() != "(":
            raise _Unreadable
        args: list[_Node] = []
        keywords: list[tuple[str, str]] = []
        while self._peek() != ")":
            if self.at + 1 < len(self.tokens) and self.tokens[self.at + 1] == "=":
                key = self._next()
                self._next()
                keywords.append((key, self._next()))
            else:
                args.append(self._node(depth + 1))
            if self._peek() == ",":
                self._next()
            elif self._peek() != ")":
                raise _Unreadable
        self._next()
        return _Call(token, tuple(args), tuple(keywords))


def _bounds(node: _Node, ranges: Mapping[str, RangeConstraint]) -> Bounds:
    if isinstance(node, int):
        return Bounds(node, node)
    if isinstance(node, str):
        raise _Unreadable
    if node.name == "Integer" and len(node.args) == 1 and isinstance(node.args[0], int):
        return Bounds(node.args[0], node.args[0])
    if node.name == "Symbol" and len(node.args) == 1 and isinstance(node.args[0], str):
        return _symbol(node.args[0], dict(node.keywords), ranges)
    rule = _RULES.get(node.name)
    if rule is None:
        return _ANY
    return rule([_bounds(arg, ranges) for arg in node.args])


def _symbol(name: str, assumed: dict[str, str], ranges: Mapping[str, RangeConstraint]) -> Bounds:
    lo: _End = -math.inf
    hi: _End = math.inf
    if assumed.get("positive") == "True":
        lo = 1
    elif assumed.get("nonnegative") == "True":
        lo = 0
    found = ranges.get(name)
    if found is not None:
        if found.min_val is not None:
            lo = max(lo, found.min_val)
        if found.max_val is not None:
            hi = min(hi, found.max_val)
    return Bounds(lo, hi)


def _times(a: _End, b: _End) -> _End:
    # 0 * inf is 0 here: a zero factor makes the product zero whatever the other one is
    return 0 if a == 0 or b == 0 else a * b


def _add(args: list[Bounds]) -> Bounds:
    return Bounds(sum(b.lo for b in args), sum(b.hi for b in args))


def _mul(args: list[Bounds]) -> Bounds:
    out = Bounds(1, 1)
    for b in args:
        ends = [_times(x, y) for x in (out.lo, out.hi) for y in (b.lo, b.hi)]
        out = Bounds(min(ends), max(ends))
    return out


def _min(args: list[Bounds]) -> Bounds:
    return Bounds(min(b.lo for b in args), min(b.hi for b in args)) if args else _ANY


def _max(args: list[Bounds]) -> Bounds:
    return Bounds(max(b.lo for b in args), max(b.hi for b in args)) if args else _ANY


def _divisor(args: list[Bounds]) -> int | None:
    """The constant positive divisor of a two-argument division, else None."""
    if len(args) != 2:
        return None
    d = args[1]
    return d.lo if d.lo == d.hi and isinstance(d.lo, int) and d.lo > 0 else None


def _floor_div(args: list[Bounds]) -> Bounds:
    d = _divisor(args)
    if d is None:
        return _ANY
    a = args[0]
    return Bounds(_floor(a.lo, d), _floor(a.hi, d))


def _floor(x: _End, d: int) -> _End:
    return x // d if isinstance(x, int) else x


def _mod(args: list[Bounds]) -> Bounds:
    d = _divisor(args)
    if d is None:
        return _ANY
    a = args[0]
    if isinstance(a.lo, int) and a.lo == a.hi:
        return Bounds(a.lo % d, a.lo % d)
    if isinstance(a.lo, int) and isinstance(a.hi, int) and 0 <= a.lo and a.hi < d:
        return a
    return Bounds(0, d - 1)


_RULES: dict[str, Callable[[list[Bounds]], Bounds]] = {
    "Add": _add,
    "Mul": _mul,
    "Min": _min,
    "Max": _max,
    "FloorDiv": _floor_div,
    "Mod": _mod,
    "PythonMod": _mod,
}
