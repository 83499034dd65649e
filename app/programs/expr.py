"""A checker for the symbolic expressions and shape guards torch writes; it evaluates nothing.

torch 2.13 hands every `SymExpr.expr_str` to `sympy.sympify` (an `eval`) and `exec`s the
`guards_code` of a program it loads. This module accepts only the small grammar torch itself
prints (sympy's `srepr` and `str` forms for expressions, torch's Python printer for guards),
with bounds on length, nesting, integer size and exponents, and refuses everything else.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from app.failure import Failure, ProblemCode
from app.programs.expr_grammar import (
    ASSUMPTIONS,
    BINARY,
    COMPARISONS,
    CONSTANTS,
    FUNCTIONS,
    GUARD_CONSTANTS,
    GUARD_FUNCTIONS,
    GUARD_METHODS,
    KEYWORDS,
    KINDS,
    MAX_ARGUMENTS,
    MAX_DEPTH,
    MAX_DIGITS,
    MAX_EXPONENT,
    MAX_LENGTH,
    MAX_MINMAX_PAIRS,
    MAX_OPERANDS,
    MAX_PRECISION,
    MINMAX,
    POWERS,
    SYMBOL_NAME,
    TOKEN,
    Mode,
)


class UnsafeExpression(Failure):
    """An expression or guard outside the grammar torch writes; `position` is the offset."""

    def __init__(self, code: ProblemCode, text: str, reason: str, position: int) -> None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        super().__init__(code, f"{reason} at offset {position} in {shown!r}")
        self.reason = reason
        self.position = position


@dataclass(frozen=True)
class Checked:
    """What a checked expression mentions: the sympy symbols (s0, u1, ...) it uses."""

    symbols: frozenset[str]


@dataclass(frozen=True)
class _Token:
    kind: Literal["num", "name", "str", "op", "end"]
    text: str
    pos: int


@dataclass(frozen=True)
class _Value:
    """What the checker knows about a parsed operand."""

    kind: Literal["value", "str", "bool"] = "value"
    #: the exact number, when the operand is a plain numeric literal
    number: Fraction | None = None
    #: whether the operand is a bare symbol
    symbol: bool = False
    #: the accumulated power the operand may raise a number to
    size: int = 1
    text: str = ""
    #: "Max" or "Min" for such a call, and how many arguments sympy's flattened call has
    lattice: str = ""
    spread: int = 0


_PLAIN = _Value()


def check_expression(text: str) -> Checked:
    """Check a sympy expression string (srepr or str form); UnsafeExpression if refused."""
    return _check(text, "expression")


def check_guard(text: str) -> Checked:
    """Check one line of `guards_code` (torch's Python guard printer); UnsafeExpression if not."""
    return _check(text, "guard")


def is_symbol_name(text: str) -> bool:
    """Whether `text` is a symbol name as torch's shape environment writes them."""
    return SYMBOL_NAME.fullmatch(text) is not None


#: Texts up to this long have their verdicts cached (programs repeat the same few in every
#: tensor's meta); longer ones are rare and would make the cache heavy.
_CACHED_LENGTH = 512


def _check(text: str, mode: Mode) -> Checked:
    verdict = _cached_verdict(text, mode) if len(text) <= _CACHED_LENGTH else _verdict(text, mode)
    if isinstance(verdict, Checked):
        return verdict
    reason, position = verdict
    code: ProblemCode = "unsafe-expression" if mode == "expression" else "unsafe-guards-code"
    raise UnsafeExpression(code, text, reason, position)


def _verdict(text: str, mode: Mode) -> Checked | tuple[str, int]:
    """The symbols of an accepted text, or why and where it is refused."""
    try:
        return _Parser(text, mode).run()
    except UnsafeExpression as exc:
        return exc.reason, exc.position


_cached_verdict = functools.lru_cache(maxsize=4096)(_verdict)


class _Parser:
    """Recursive descent over Python's expression grammar, cut down to what torch prints."""

    def __init__(self, text: str, mode: Mode) -> None:
        self.text = text
        self.mode = mode
        self.tokens: list[_Token] = []
        self.i = 0
        self.depth = 0
        self.minmax_pairs = 0
        self.symbols: set[str] = set()

    def run(self) -> Checked:
        if len(self.text) > MAX_LENGTH:
            raise self._refuse(f"longer than {MAX_LENGTH} characters", 0)
        if not self.text.strip(" "):
            raise self._refuse("empty", 0)
        self.tokens = list(self._tokenize())
        operands = {t.text for t in self.tokens if t.kind in ("num", "name")}
        if len(operands) > MAX_OPERANDS:
            raise self._refuse(f"more than {MAX_OPERANDS} distinct operands", 0)
        value = self._guard() if self.mode == "guard" else self._comparison()
        if self._peek().kind != "end":
            raise self._refuse(f"unexpected {self._peek().text!r}", self._peek().pos)
        if value.kind == "str":
            raise self._refuse("a string is not an expression", 0)
        return Checked(frozenset(self.symbols))

    # ------------------------------------------------------------ tokens

    def _tokenize(self) -> Iterator[_Token]:
        pos = 0
        end = len(self.text)
        while True:
            # torch separates tokens with plain spaces; tabs and newlines change Python's parse
            while pos < end and self.text[pos] == " ":
                pos += 1
            if pos == end:
                yield _Token("end", "", pos)
                return
            match = TOKEN.match(self.text, pos)
            if match is None:
                raise self._refuse(f"unexpected character {self.text[pos]!r}", pos)
            kind = KINDS[match.lastgroup or ""]
            yield _Token(kind, match.group(kind), match.start(kind))
            pos = match.end()

    def _peek(self) -> _Token:
        return self.tokens[self.i]

    def _next(self) -> _Token:
        token = self.tokens[self.i]
        if token.kind != "end":
            self.i += 1
        return token

    def _at(self, text: str) -> bool:
        token = self.tokens[self.i]
        return token.kind in ("op", "name") and token.text == text

    def _expect(self, text: str) -> _Token:
        token = self._next()
        if token.text != text or token.kind not in ("op", "name"):
            shown = token.text or "the end"
            raise self._refuse(f"expected {text!r}, got {shown!r}", token.pos)
        return token

    def _refuse(self, reason: str, position: int) -> UnsafeExpression:
        code: ProblemCode = (
            "unsafe-expression" if self.mode == "expression" else "unsafe-guards-code"
        )
        return UnsafeExpression(code, self.text, reason, position)

    def _enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self._refuse(f"nested deeper than {MAX_DEPTH}", pos)

    # ------------------------------------------------------------ guard-only levels

    def _guard(self) -> _Value:
        """Python's conditional expression, as torch prints a Piecewise."""
        pos = self._peek().pos
        self._enter(pos)
        try:
            value = self._or()
            if self._at("if"):
                self._next()
                self._or()
                self._expect("else")
                other = self._guard()
                return _Value(size=max(value.size, other.size))
            return value
        finally:
            self.depth -= 1

    def _or(self) -> _Value:
        value = self._and()
        while self._at("or"):
            token = self._next()
            value = self._combine(value, self._and(), token)
        return value

    def _and(self) -> _Value:
        value = self._not()
        while self._at("and"):
            token = self._next()
            value = self._combine(value, self._not(), token)
        return value

    def _not(self) -> _Value:
        if self._at("not"):
            token = self._next()
            self._enter(token.pos)
            try:
                return self._plain(self._not(), token)
            finally:
                self.depth -= 1
        return self._comparison()

    # ------------------------------------------------------------ shared levels

    def _comparison(self) -> _Value:
        left = self._binary(1)
        token = self._peek()
        if token.kind == "op" and token.text in COMPARISONS:
            self._next()
            right = self._binary(1)
            strings = self.mode == "guard"
            self._operand(left, token, strings)
            self._operand(right, token, strings)
            after = self._peek()
            if after.kind == "op" and after.text in COMPARISONS:
                raise self._refuse("chained comparison", after.pos)
            return _Value(kind="bool", size=max(left.size, right.size))
        return left

    def _binary(self, min_precedence: int) -> _Value:
        left = self._unary()
        chained, chain = 0, 1
        while True:
            token = self._peek()
            precedence = BINARY.get(token.text) if token.kind == "op" else None
            if precedence is None or precedence < min_precedence:
                return left
            chain = chain + 1 if precedence == chained else 2
            if chain > MAX_ARGUMENTS:
                raise self._refuse(f"a chain of more than {MAX_ARGUMENTS} operands", token.pos)
            chained = precedence
            self._next()
            right = self._binary(precedence + 1)
            left = self._combine(left, right, token)

    def _unary(self) -> _Value:
        token = self._peek()
        self._enter(token.pos)
        try:
            if token.kind == "op" and token.text in ("-", "+", "~"):
                self._next()
                value = self._unary()
                self._operand(value, token)
                if token.text == "-" and value.number is not None:
                    return _Value(number=-value.number, size=value.size)
                if token.text == "+":
                    return value
                return _Value(size=value.size)
            return self._power()
        finally:
            self.depth -= 1

    def _power(self) -> _Value:
        base = self._primary()
        if self._at("**"):
            token = self._next()
            exponent = self._unary()
            return self._raise(base, exponent, token)
        return base

    def _primary(self) -> _Value:
        token = self._next()
        if token.kind == "num":
            return self._number(token)
        if token.kind == "str":
            return _Value(kind="str", text=token.text[1:-1])
        if token.kind == "op" and token.text == "(":
            if self.mode == "guard":
                value = self._guard()
            else:
                value = self._comparison()
                # sympy's str form writes Piecewise branches as tuples
                while self._at(","):
                    self._operand(value, token)
                    self._next()
                    item = self._comparison()
                    self._operand(item, token)
                    value = _Value(size=max(value.size, item.size))
            self._expect(")")
            return value
        if token.kind == "name":
            if self.mode == "guard":
                return self._guard_name(token)
            return self._expression_name(token)
        shown = token.text or "the end"
        raise self._refuse(f"unexpected {shown!r}", token.pos)

    # ------------------------------------------------------------ operands

    def _number(self, token: _Token) -> _Value:
        mantissa = re.split(r"[eE]", token.text)[0]
        digits = sum(c.isdigit() for c in mantissa)
        if digits > MAX_DIGITS:
            raise self._refuse(f"a number with more than {MAX_DIGITS} digits", token.pos)
        exponent = token.text[len(mantissa) + 1 :] if len(mantissa) < len(token.text) else ""
        if len(exponent.lstrip("+-")) > 4:
            raise self._refuse("a number with a huge exponent", token.pos)
        if "." in token.text or exponent:
            return _Value(number=Fraction(token.text))
        return _Value(number=Fraction(int(token.text)))

    def _operand(self, value: _Value, token: _Token, strings: bool = False) -> None:
        if value.kind == "str" and not strings:
            raise self._refuse(f"a string operand of {token.text!r}", token.pos)

    def _plain(self, value: _Value, token: _Token) -> _Value:
        self._operand(value, token)
        return _Value(size=value.size)

    def _combine(self, left: _Value, right: _Value, token: _Token) -> _Value:
        self._operand(left, token)
        self._operand(right, token)
        return _Value(size=max(left.size, right.size))

    def _raise(self, base: _Value, exponent: _Value, token: _Token) -> _Value:
        """A power: the exponent must be a small number or a bare symbol."""
        self._operand(base, token)
        self._operand(exponent, token)
        if exponent.symbol:
            return _Value(size=base.size)
        if exponent.number is None:
            raise self._refuse("an exponent that is not a number or a symbol", token.pos)
        factor = max(1, abs(exponent.number.numerator) // max(1, exponent.number.denominator))
        size = base.size * factor
        if size > MAX_EXPONENT:
            raise self._refuse(f"a power above {MAX_EXPONENT}", token.pos)
        return _Value(size=size)

    # ------------------------------------------------------------ names (expressions)

    def _expression_name(self, token: _Token) -> _Value:
        name = token.text
        if self._at("("):
            if name not in FUNCTIONS:
                raise self._refuse(f"the function {name!r} is not allowed", token.pos)
            return self._call(token)
        if name in CONSTANTS:
            return _Value(kind="bool") if name in ("true", "false", "True", "False") else _PLAIN
        if is_symbol_name(name):
            self.symbols.add(name)
            return _Value(symbol=True)
        raise self._refuse(f"the name {name!r} is not a symbol", token.pos)

    def _call(self, token: _Token) -> _Value:
        self._expect("(")
        self._enter(token.pos)
        try:
            args: list[_Value] = []
            keywords: dict[str, _Value] = {}
            while not self._at(")"):
                if args or keywords:
                    self._expect(",")
                    if self._at(")"):
                        break
                here = self._peek()
                if here.kind == "name" and self.tokens[self.i + 1].text == "=":
                    self._next()
                    self._next()
                    if here.text in keywords:
                        raise self._refuse(f"repeated keyword {here.text!r}", here.pos)
                    keywords[here.text] = self._comparison()
                elif keywords:
                    raise self._refuse("a positional argument after a keyword", here.pos)
                else:
                    args.append(self._comparison())
            self._expect(")")
        finally:
            self.depth -= 1
        return self._apply(token, args, keywords)

    def _apply(self, token: _Token, args: list[_Value], keywords: dict[str, _Value]) -> _Value:
        name = token.text
        if len(args) > MAX_ARGUMENTS:
            raise self._refuse(f"a call with more than {MAX_ARGUMENTS} arguments", token.pos)
        if name == "Symbol":
            return self._symbol(token, args, keywords)
        if name == "Float":
            return self._float(token, args, keywords)
        if keywords:
            raise self._refuse(f"keyword arguments to {name}", token.pos)
        for arg in args:
            self._operand(arg, token)
        if name in MINMAX:
            return self._lattice(token, args)
        if name == "Integer":
            if len(args) != 1 or args[0].number is None or args[0].number.denominator != 1:
                raise self._refuse("Integer takes one integer literal", token.pos)
            return _Value(number=args[0].number)
        if name == "Rational":
            p, q = (args[0].number, args[1].number) if len(args) == 2 else (None, None)
            if p is None or q is None or p.denominator != 1 or q.denominator != 1:
                raise self._refuse("Rational takes two integer literals", token.pos)
            return _Value(number=p / q) if q else _PLAIN
        if name in POWERS:
            if len(args) != 2:
                raise self._refuse(f"{name} takes two arguments", token.pos)
            return self._raise(args[0], args[1], token)
        return _Value(size=max((a.size for a in args), default=1))

    def _lattice(self, token: _Token, args: list[_Value]) -> _Value:
        """A Max or Min call: sympy compares the arguments of its flattened call pairwise."""
        spread = sum(a.spread if a.lattice == token.text else 1 for a in args)
        self.minmax_pairs += spread * (spread - 1) // 2
        if self.minmax_pairs > MAX_MINMAX_PAIRS:
            raise self._refuse(
                f"more than {MAX_MINMAX_PAIRS} pairs of Max and Min arguments to compare",
                token.pos,
            )
        size = max((a.size for a in args), default=1)
        return _Value(size=size, lattice=token.text, spread=spread)

    def _symbol(self, token: _Token, args: list[_Value], keywords: dict[str, _Value]) -> _Value:
        if len(args) != 1 or args[0].kind != "str" or not is_symbol_name(args[0].text):
            raise self._refuse("Symbol takes one quoted symbol name", token.pos)
        for key, value in keywords.items():
            if key not in ASSUMPTIONS or value.kind != "bool":
                raise self._refuse(f"Symbol assumption {key!r} must be a known flag", token.pos)
        self.symbols.add(args[0].text)
        return _Value(symbol=True)

    def _float(self, token: _Token, args: list[_Value], keywords: dict[str, _Value]) -> _Value:
        if len(args) != 1 or args[0].kind != "str":
            raise self._refuse("Float takes one quoted number", token.pos)
        literal = args[0].text.strip()
        sign = literal[:1] if literal[:1] in "+-" else ""
        body = literal[len(sign) :]
        if body in ("inf", "nan"):
            return _PLAIN
        if not re.fullmatch(r"[0-9]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?", body) or not any(
            c.isdigit() for c in body
        ):
            raise self._refuse("Float takes one quoted number", token.pos)
        self._number(_Token("num", body, token.pos))
        for key, value in keywords.items():
            number = value.number
            if key not in ("precision", "dps") or number is None or number.denominator != 1:
                raise self._refuse(f"Float keyword {key!r} is not allowed", token.pos)
            if not 0 < number <= MAX_PRECISION:
                raise self._refuse(f"a Float precision above {MAX_PRECISION}", token.pos)
        return _Value(number=Fraction(body) * (-1 if sign == "-" else 1))

    # ------------------------------------------------------------ names (guards)

    def _guard_name(self, token: _Token) -> _Value:
        if token.text in KEYWORDS:
            raise self._refuse(f"unexpected {token.text!r}", token.pos)
        if token.text == "L" and self._at("["):
            return self._source(token)
        dotted = token.text
        while self._at(".") and self.tokens[self.i + 1].kind == "name":
            self._next()
            dotted += "." + self._next().text
        if self._at("("):
            if dotted not in GUARD_FUNCTIONS:
                raise self._refuse(f"the function {dotted!r} is not allowed", token.pos)
            return self._guard_call(token)
        if dotted in GUARD_CONSTANTS:
            return _Value(kind="bool") if dotted in ("True", "False") else _PLAIN
        raise self._refuse(f"the name {dotted!r} is not allowed", token.pos)

    def _guard_call(self, token: _Token) -> _Value:
        self._expect("(")
        self._enter(token.pos)
        try:
            sizes = [1]
            while not self._at(")"):
                if len(sizes) > 1:
                    self._expect(",")
                value = self._guard()
                self._operand(value, token)
                sizes.append(value.size)
            self._expect(")")
        finally:
            self.depth -= 1
        return _Value(size=max(sizes))

    def _source(self, token: _Token) -> _Value:
        """``L['x']['k'][0].attr.size()[1]``: a path into the inputs, then a tensor property."""
        while True:
            if self._at("["):
                self._next()
                key = self._next()
                if key.kind not in ("str", "num") or (key.kind == "num" and not key.text.isdigit()):
                    raise self._refuse("a source key must be a string or an index", key.pos)
                self._expect("]")
            elif self._at(".") and self.tokens[self.i + 1].kind == "name":
                self._next()
                attr = self._next()
                if attr.text.startswith("__"):
                    raise self._refuse(f"the attribute {attr.text!r} is not allowed", attr.pos)
                if attr.text in GUARD_METHODS:
                    self._expect("(")
                    self._expect(")")
                    if self._at("["):
                        self._next()
                        index = self._next()
                        if index.kind != "num" or not index.text.isdigit():
                            raise self._refuse("a dimension must be an index", index.pos)
                        self._expect("]")
                    return _PLAIN
                if self._at("("):
                    raise self._refuse(f"the call {attr.text!r} is not allowed", attr.pos)
            else:
                return _PLAIN
