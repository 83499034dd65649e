"""The vocabulary of the expressions and guards torch writes: the names, operators and bounds
`app.programs.expr` accepts (sympy's printers and torch's guard printer, as of torch 2.13)."""

from __future__ import annotations

import re
from typing import Literal

#: Longest expression or guard accepted, in characters.
MAX_LENGTH = 16_384
#: Deepest nesting of parentheses, calls and unary operators.
MAX_DEPTH = 64
#: Most digits of one integer literal (int64 needs 19).
MAX_DIGITS = 40
#: Largest power an expression may raise to, accumulated through nested powers and shifts.
MAX_EXPONENT = 64
#: Largest binary precision of a sympy Float.
MAX_PRECISION = 1024
#: Most distinct operands (names and numbers) in one text. Distinct, not in all: torch writes
#: sizes in sympy's srepr form, which repeats whole subterms (a Swin-style window padding
#: repeats one symbol 100 times in 11 KB, which sympy reads in 0.3 s). Repeats cost sympy time
#: in proportion to the text, which MAX_LENGTH bounds; the number of distinct terms it must
#: combine, and the length of each chain below, is what makes its work grow faster than that.
MAX_OPERANDS = 256
#: Most arguments of one call, and most operands of one chain of binary operators at one
#: precedence (`a + b - c + ...`), which sympy flattens into one Add or Mul as if a call's.
MAX_ARGUMENTS = 64
#: Most pairs of arguments sympy compares in the Max and Min calls of one text together: it
#: flattens directly nested calls of the same kind and compares their arguments pairwise (one
#: Max of 64 symbols took 2.8 s, of 2500 pinned a worker for minutes, while torch writes many
#: Min calls of two arguments each). The bound is one Max of 32 arguments.
MAX_MINMAX_PAIRS = 32 * 31 // 2
MINMAX = frozenset({"Max", "Min"})

Mode = Literal["expression", "guard"]

#: Symbols as torch's ShapeEnv and inductor name them (s0, u3, zuf0, r0_1, ...).
SYMBOL_NAME = re.compile(r"[a-z][a-z_]{0,15}[0-9][0-9_]{0,15}")

CONSTANTS = frozenset({"oo", "int_oo", "zoo", "nan", "true", "false", "True", "False"})
ASSUMPTIONS = frozenset(
    {
        "integer",
        "noninteger",
        "positive",
        "negative",
        "nonnegative",
        "nonpositive",
        "zero",
        "nonzero",
        "real",
        "extended_real",
        "extended_positive",
        "extended_negative",
        "extended_nonnegative",
        "extended_nonpositive",
        "extended_nonzero",
        "finite",
        "infinite",
        "rational",
        "irrational",
        "even",
        "odd",
        "prime",
        "composite",
        "commutative",
        "complex",
        "imaginary",
        "hermitian",
        "antihermitian",
        "algebraic",
        "transcendental",
    }
)
OPAQUE_UNARY = ("sqrt", "cos", "cosh", "acos", "sin", "sinh", "asin", "tan", "tanh", "atan")
OPAQUE_UNARY_MORE = ("asinh", "exp", "log", "log2")
#: sympy classes srepr spells, sympy functions str spells, and torch's sympy functions
#: (torch/utils/_sympy/functions.py, the locals of torch's deserializer).
FUNCTIONS = frozenset(
    {
        "Symbol",
        "Integer",
        "Rational",
        "Float",
        "Add",
        "Mul",
        "Pow",
        "Max",
        "Min",
        "Abs",
        "Mod",
        "sqrt",
        "floor",
        "ceiling",
        "Eq",
        "Ne",
        "Lt",
        "Le",
        "Gt",
        "Ge",
        "Equality",
        "Unequality",
        "StrictLessThan",
        "LessThan",
        "StrictGreaterThan",
        "GreaterThan",
        "And",
        "Or",
        "Not",
        "Piecewise",
        "ExprCondPair",
        "FloorDiv",
        "ModularIndexing",
        "Where",
        "PythonMod",
        "CleanDiv",
        "CeilToInt",
        "FloorToInt",
        "CeilDiv",
        "LShift",
        "RShift",
        "PowByNatural",
        "FloatPow",
        "FloatTrueDiv",
        "IntTrueDiv",
        "IsNonOverlappingAndDenseIndicator",
        "TruncToFloat",
        "TruncToInt",
        "RoundToInt",
        "RoundDecimal",
        "ToFloat",
        "Identity",
        "BitwiseFn_bitwise_and",
        "BitwiseFn_bitwise_or",
        "BitwiseFn_bitwise_xor",
        *(f"OpaqueUnaryFn_{name}" for name in OPAQUE_UNARY + OPAQUE_UNARY_MORE),
    }
)
#: Functions whose second argument is an exponent or a shift: it multiplies the size of a value.
POWERS = frozenset({"Pow", "PowByNatural", "FloatPow", "LShift", "RShift"})
#: Callables torch's Python printer writes into guards (torch/utils/_sympy/printers.py).
GUARD_FUNCTIONS = frozenset(
    {
        "abs",
        "max",
        "min",
        "round",
        "math.floor",
        "math.ceil",
        "math.trunc",
        "math.isnan",
        "math.sqrt",
        *(f"math.{name}" for name in OPAQUE_UNARY[1:] + ("log2",)),
        "torch.sym_float",
        "torch.sym_int",
        "torch.sym_max",
        "torch.sym_min",
        "torch.sym_not",
        "torch.sym_ite",
        "torch.sym_sqrt",
        "torch._sym_sqrt",
        "IsNonOverlappingAndDenseIndicator",
        "cast_symbool_to_symint_guardless",
    }
)
GUARD_CONSTANTS = frozenset({"math.inf", "math.nan", "inf", "True", "False"})
#: Tensor properties a guard source may read (TensorPropertySource).
GUARD_METHODS = frozenset({"size", "stride", "storage_offset", "numel", "dim"})

TOKEN = re.compile(
    r"""(?:
      (?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<str>'[^'\\\n\r]*')
    | (?P<op>\*\*|//|==|!=|<=|>=|[-+*/%()<>,=\[\].&|~])
    )""",
    re.VERBOSE,
)
KINDS: dict[str, Literal["num", "name", "str", "op"]] = {
    "num": "num",
    "name": "name",
    "str": "str",
    "op": "op",
}
COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
#: Python's precedence of the binary operators the grammar keeps (higher binds tighter).
BINARY = {"|": 1, "&": 2, "+": 3, "-": 3, "*": 4, "/": 4, "//": 4, "%": 4}
KEYWORDS = frozenset({"and", "or", "not", "if", "else"})
