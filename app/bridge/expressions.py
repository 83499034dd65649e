"""Guard for symbolic expressions: torch's deserializer hands `expr_str` to sympy, which evals it.

Only what torch itself prints (sympy `srepr` or `str` form) is let through: numbers, operators,
parentheses, symbol names (`s0`, `u3`, `zuf0`, `r0_1`), a fixed set of sympy and torch class
names, keyword assumptions (`positive=True`) and quoted names or numbers (`'s0'`, `'1.5'`).
No attribute access, subscripts, free strings or dunders: nothing but sympy arithmetic can run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from app.bridge.errors import BridgeFailure
from schema import (
    ArgumentAsGraph,
    ExportedProgram,
    Graph,
    Issue,
    SymBoolAsExpr,
    SymFloatAsExpr,
    SymIntAsExpr,
    TensorMeta,
)
from schema.errors import pointer

_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
    r"|(?P<keyword>[a-z][a-z_]*)\s*=(?!=)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|'(?P<quoted>[A-Za-z0-9_.+-]*)'"
    r"|(?P<op>\*\*|//|==|!=|<=|>=|[-+*/%()<>,&|~^]))"
)
_SYMBOL = re.compile(r"[a-z][a-z0-9_]*[0-9]")
_OPAQUE = re.compile(r"(?:OpaqueUnaryFn|BitwiseFn)_[a-z]+(?:_[a-z]+)*")

#: torch's sympy functions (GraphModuleDeserializer.sympy_functions) and sympy's own that it prints.
FUNCTIONS: frozenset[str] = frozenset(
    {
        "FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt",
        "FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv",
        "IntTrueDiv", "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt",
        "RoundToInt", "RoundDecimal", "ToFloat", "Identity",
        "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Max", "Min", "And", "Or", "Not", "Xor",
        "Piecewise", "ITE", "Abs", "floor", "ceiling", "sqrt", "exp", "log",
        "Add", "Mul", "Pow", "Integer", "Rational", "Float", "Symbol", "Dummy", "Tuple",
        "Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan",
        "GreaterThan", "ExprCondPair", "BooleanTrue", "BooleanFalse",
        "Infinity", "NegativeInfinity", "IntInfinity", "NegativeIntInfinity", "NaN",
        "Half", "One", "Zero", "NegativeOne",
        "oo", "zoo", "nan", "pi", "E", "I", "int_oo", "True", "False", "true", "false",
    }
)  # fmt: skip


def unsafe_reason(expr: str) -> str | None:
    """Why `expr` is not plain sympy arithmetic, or None when sympy may parse it."""
    position = 0
    while position < len(expr):
        if expr[position:].isspace():
            return None
        match = _TOKEN.match(expr, position)
        if match is None:
            rest = expr[position:]
            at = position + len(rest) - len(rest.lstrip())
            return f"unexpected character {expr[at]!r} at {at}"
        name = match.group("name")
        if name is not None and not _allowed_name(name):
            return f"name {name!r} is not a symbol or a known function"
        keyword, quoted = match.group("keyword"), match.group("quoted")
        if "__" in (keyword or quoted or ""):
            return f"{keyword or quoted!r} contains a double underscore"
        position = match.end()
    return None


def _allowed_name(name: str) -> bool:
    if "__" in name:
        return False
    return name in FUNCTIONS or bool(_SYMBOL.fullmatch(name) or _OPAQUE.fullmatch(name))


def check_expressions(doc: ExportedProgram) -> None:
    """BridgeFailure `unsafe-expression` lists every expression torch must not be given."""
    issues = [
        Issue("unsafe-expression", path, reason)
        for path, expr in expressions(doc)
        if (reason := unsafe_reason(expr)) is not None
    ]
    if issues:
        raise BridgeFailure(
            "unsafe-expression",
            f"{len(issues)} symbolic expression(s) are not plain arithmetic",
            issues,
        )


def expressions(doc: ExportedProgram) -> Iterator[tuple[str, str]]:
    """Every (JSON pointer, expr_str) torch's deserializer would parse, subgraphs included."""
    yield from _graph_expressions(doc.graph_module.graph, ["graph_module", "graph"])


def _graph_expressions(graph: Graph, path: list[str | int]) -> Iterator[tuple[str, str]]:
    for name, meta in graph.tensor_values.items():
        yield from _meta_expressions(meta, [*path, "tensor_values", name])
    for field, values in (
        ("sym_int_values", graph.sym_int_values),
        ("sym_bool_values", graph.sym_bool_values),
        ("sym_float_values", graph.sym_float_values),
    ):
        for name, value in values.items():
            if isinstance(value, SymIntAsExpr | SymBoolAsExpr | SymFloatAsExpr):
                yield pointer([*path, field, name, "as_expr", "expr_str"]), value.as_expr.expr_str
    for i, node in enumerate(graph.nodes):
        for j, named in enumerate(node.inputs):
            if isinstance(named.arg, ArgumentAsGraph):
                yield from _graph_expressions(
                    named.arg.as_graph.graph,
                    [*path, "nodes", i, "inputs", j, "arg", "as_graph", "graph"],
                )


def _meta_expressions(meta: TensorMeta, path: list[str | int]) -> Iterator[tuple[str, str]]:
    for field, values in (("sizes", meta.sizes), ("strides", meta.strides)):
        for k, value in enumerate(values):
            if isinstance(value, SymIntAsExpr):
                yield pointer([*path, field, k, "as_expr", "expr_str"]), value.as_expr.expr_str
    if isinstance(meta.storage_offset, SymIntAsExpr):
        yield (
            pointer([*path, "storage_offset", "as_expr", "expr_str"]),
            (meta.storage_offset.as_expr.expr_str),
        )
