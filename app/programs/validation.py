"""Validation of documents without torch: bounds, schema, semantics and the safety screen.

Levels: `schema` (bounds, then the document against the wire models), `semantic` (names,
metadata, signature, weights, ranges, module call graph, opset, and the safety screen of
`app.programs.screen`), `torch` (the same here; the bridge adds torch's own checks and
removes "torch" from `unchecked`).
"""

from __future__ import annotations

import array
import functools
import itertools
import math
import re
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticUndefined

import schema
from app.programs.expr import UnsafeExpression, check_expression
from app.programs.opcheck import check_operators
from app.settings import Settings
from schema.description import field_annotation, field_wire
from schema.errors import pointer
from schema.models import ENUMS

Severity = Literal["error", "warning", "info"]
Level = Literal["schema", "semantic", "torch"]
Kind = Literal["tensor", "sym_int", "sym_bool", "sym_float", "custom_obj"]

#: The oldest schema version a document can be said to need: the first 8.x torch shipped.
FLOOR: schema.Version = (8, 2)
#: Python refuses to print integers longer than this (sys.int_info.default_max_str_digits).
MAX_NUMBER_DIGITS = 4300
#: Findings of one code past this many are dropped and counted in a `findings-truncated` note.
MAX_FINDINGS_PER_CODE = 200

_CURRENT = schema.format_version(schema.CURRENT)
_GRAPH = "/graph_module/graph"
_INPUT_SPECS = "/graph_module/signature/input_specs"
_OUTPUT_SPECS = "/graph_module/signature/output_specs"
_CALL_GRAPH = "/graph_module/module_call_graph"


class Finding(BaseModel):
    """One problem or note: a stable code, its severity, a JSON pointer and a message."""

    model_config = ConfigDict(frozen=True)

    code: str
    severity: Severity
    path: str
    message: str


class Report(BaseModel):
    """The outcome of validating one document at one level."""

    valid: bool
    level: Level
    findings: list[Finding]
    #: JSON pointers of keys the schema does not declare (kept, and reported as warnings).
    unknown_fields: list[str]
    #: the oldest schema version that has every field, arm and enum value the document uses
    min_schema_version: str
    #: the oldest torch release that writes `min_schema_version` or newer
    oldest_torch_release: str
    #: custom operator namespaces a torch process must import before loading the program
    namespaces_to_register: list[str]
    #: what this report did not check: "semantic", "safety", "weights", "torch"
    unchecked: list[str]


class FindingList:
    """Collects findings, keeping at most MAX_FINDINGS_PER_CODE of each code."""

    def __init__(self) -> None:
        self._items: list[Finding] = []
        self._counts: Counter[str] = Counter()

    def add(self, code: str, severity: Severity, path: str, message: str) -> None:
        """Record a finding (or only count it, past the per-code limit)."""
        self._counts[code] += 1
        if self._counts[code] <= MAX_FINDINGS_PER_CODE:
            self._items.append(Finding(code=code, severity=severity, path=path, message=message))

    def extend(self, findings: Iterable[Finding]) -> None:
        """Record findings made elsewhere."""
        for f in findings:
            self.add(f.code, f.severity, f.path, f.message)

    def result(self) -> list[Finding]:
        """The findings kept, with a note per code that had more."""
        notes = [
            Finding(
                code="findings-truncated",
                severity="info",
                path="",
                message=f"{count - MAX_FINDINGS_PER_CODE} more {code!r} findings not listed",
            )
            for code, count in self._counts.items()
            if count > MAX_FINDINGS_PER_CODE
        ]
        return [*self._items, *notes]


# ---------------------------------------------------------------- entry points


def validate_bytes(
    data: bytes,
    level: Level,
    settings: Settings,
    tensors: Mapping[str, schema.TensorMeta] | None = None,
    pickled: Sequence[str] = (),
) -> tuple[Report, schema.ExportedProgram | None]:
    """Check bounds, parse and validate a document; the parsed document unless unreadable."""
    bounds = check_bounds(data, settings)
    if bounds:
        return _unread(level, bounds), None
    try:
        read = schema.read(data, schema.ExportedProgram)
    except schema.DocumentInvalid as exc:
        found = FindingList()
        for issue in exc.issues:
            found.add(issue.code, "error", issue.path, issue.message)
        return _unread(level, found.result()), None
    report = validate_document(
        read.document, level, settings, tensors, pickled, unknown=read.unknown_fields
    )
    return report, read.document


def validate_document(
    doc: schema.ExportedProgram,
    level: Level,
    settings: Settings,
    tensors: Mapping[str, schema.TensorMeta] | None = None,
    pickled: Sequence[str] = (),
    *,
    unknown: list[str] | None = None,
) -> Report:
    """Validate a parsed document: unknown fields (as its read found them, or looked up), then
    semantics and safety unless the level is `schema`."""
    # screen imports this module for Finding, so it is imported at first use
    from app.programs.screen import custom_namespaces, screen

    found = FindingList()
    if unknown is None:
        unknown = schema.unknown_fields(doc)
    for path in unknown:
        found.add("unknown-field", "warning", path, f"not declared by schema {_CURRENT}; kept")
    graphs: list[tuple[schema.Graph, str]] | None = None
    if level == "schema":
        unchecked = ["semantic", "safety", "weights", "torch"]
    else:
        graphs = list(walk_graphs(doc))
        _Semantics(doc, graphs, tensors, found).run()
        found.extend(screen(doc, settings, pickled, graphs=graphs))
        unchecked = [*(["weights"] if tensors is None else []), "torch"]
    version = schema_floor(doc)
    findings = found.result()
    return Report(
        valid=not any(f.severity == "error" for f in findings),
        level=level,
        findings=findings,
        unknown_fields=unknown,
        min_schema_version=schema.format_version(version),
        oldest_torch_release=oldest_release(version),
        namespaces_to_register=custom_namespaces(doc, graphs=graphs),
        unchecked=unchecked,
    )


def _unread(level: Level, findings: list[Finding]) -> Report:
    return Report(
        valid=False,
        level=level,
        findings=findings,
        unknown_fields=[],
        min_schema_version="",
        oldest_torch_release="",
        namespaces_to_register=[],
        unchecked=["semantic", "safety", "weights", "torch"],
    )


# ---------------------------------------------------------------- bounds


_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
#: Openers to +1 and closers to -1 as signed bytes, so that C sums the nesting depth.
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NODE_KEY = re.compile(rb'"target"\s*:')
#: Digits to 1, all else to 0: runs of digits are then plain substring searches.
_DIGIT_MASK = bytes(int(48 <= b <= 57) for b in range(256))


def digit_runs(data: bytes, at_least: int) -> Iterator[tuple[int, int]]:
    """(start, end) of every run of `at_least` or more ASCII digits in `data`, in order."""
    mask = data.translate(_DIGIT_MASK)
    run = b"\x01" * at_least
    start = mask.find(run)
    while start != -1:
        end = mask.find(b"\x00", start)
        end = len(mask) if end == -1 else end
        yield start, end
        start = mask.find(run, end)


#: What check_bounds can find; read_document refuses a document with any of them.
BOUNDS_CODES = (
    "document-too-large",
    "document-too-deep",
    "document-string-too-long",
    "document-number-too-long",
    "document-too-many-nodes",
)


def check_bounds(data: bytes, settings: Settings) -> list[Finding]:
    """Size, nesting, string, number and node bounds, from the raw bytes before any parse."""
    if len(data) > settings.max_json_bytes:
        return [
            _bound(
                "document-too-large",
                f"{len(data)} bytes; the limit is {settings.max_json_bytes}",
            )
        ]
    # Dropping escaped backslashes and quotes leaves every remaining quote a string delimiter,
    # so a split alternates structure and string contents, all in C.
    cleaned = data.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in data else data
    parts = cleaned.split(b'"')
    found: list[Finding] = []
    longest = max(map(len, itertools.islice(parts, 1, None, 2)), default=0)
    if longest > settings.max_string_length:
        found.append(
            _bound(
                "document-string-too-long",
                f"a string of {longest} bytes; the limit is {settings.max_string_length}",
            )
        )
    structure = b"".join(itertools.islice(parts, 0, None, 2))
    del parts
    steps = structure.translate(None, delete=_NOT_BRACKETS).translate(_OPEN_CLOSE)
    depth = max(itertools.accumulate(array.array("b", steps)), default=0)
    if depth > settings.max_json_depth:
        found.append(
            _bound(
                "document-too-deep",
                f"nested {depth} levels deep; the limit is {settings.max_json_depth}",
            )
        )
    if next(digit_runs(structure, MAX_NUMBER_DIGITS + 1), None) is not None:
        found.append(
            _bound(
                "document-number-too-long", f"a number with more than {MAX_NUMBER_DIGITS} digits"
            )
        )
    # the key is counted with a plain search, which can only overcount (a string value
    # "target" not followed by a colon); the exact count is taken only past the limit
    nodes = cleaned.count(b'"target"')
    if nodes > settings.max_nodes:
        nodes = sum(1 for _ in _NODE_KEY.finditer(cleaned))
    if nodes > settings.max_nodes:
        found.append(
            _bound(
                "document-too-many-nodes",
                f"{nodes} graph nodes; the limit is {settings.max_nodes}",
            )
        )
    return found


def _bound(code: str, message: str) -> Finding:
    return Finding(code=code, severity="error", path="", message=message)


# ---------------------------------------------------------------- traversal helpers


def walk_graphs(doc: schema.ExportedProgram) -> Iterator[tuple[schema.Graph, str]]:
    """Every graph of the program with its JSON pointer: the top graph, then subgraphs."""
    stack: list[tuple[schema.Graph, str]] = [(doc.graph_module.graph, _GRAPH)]
    while stack:
        graph, path = stack.pop()
        yield graph, path
        found: list[tuple[schema.Graph, str]] = []
        for i, node in enumerate(graph.nodes):
            for j, named in enumerate(node.inputs):
                found.extend(subgraphs(named.arg, f"{path}/nodes/{i}/inputs/{j}/arg"))
        stack.extend(reversed(found))


def subgraphs(arg: Any, path: str) -> Iterator[tuple[schema.Graph, str]]:
    """The graphs an argument carries (HOP branches and bodies), with their pointers."""
    if isinstance(arg, schema.ArgumentAsGraph):
        yield arg.as_graph.graph, f"{path}/as_graph/graph"
    elif isinstance(arg, schema.ArgumentAsStringToArgument):
        for key, sub in arg.as_string_to_argument.items():
            yield from subgraphs(sub, path + pointer(["as_string_to_argument", key]))


def references(arg: Any, path: str) -> Iterator[tuple[str, str, Kind]]:
    """Every value name an argument mentions: (name, pointer to the name, kind of value)."""
    if isinstance(arg, schema.ArgumentAsTensor):
        yield arg.as_tensor.name, f"{path}/as_tensor/name", "tensor"
    elif isinstance(arg, schema.ArgumentAsTensors):
        for i, t in enumerate(arg.as_tensors):
            yield t.name, f"{path}/as_tensors/{i}/name", "tensor"
    elif isinstance(arg, schema.ArgumentAsNestedTensors):
        for i, row in enumerate(arg.as_nested_tensors):
            for j, t in enumerate(row):
                yield t.name, f"{path}/as_nested_tensors/{i}/{j}/name", "tensor"
    elif isinstance(arg, schema.ArgumentAsOptionalTensors):
        for i, opt in enumerate(arg.as_optional_tensors):
            if isinstance(opt, schema.OptionalTensorArgumentAsTensor):
                yield opt.as_tensor.name, f"{path}/as_optional_tensors/{i}/as_tensor/name", "tensor"
    elif isinstance(arg, schema.ArgumentAsOptionalTensor):
        if isinstance(arg.as_optional_tensor, schema.OptionalTensorArgumentAsTensor):
            name = arg.as_optional_tensor.as_tensor.name
            yield name, f"{path}/as_optional_tensor/as_tensor/name", "tensor"
    elif isinstance(arg, schema.ArgumentAsCustomObj):
        yield arg.as_custom_obj.name, f"{path}/as_custom_obj/name", "custom_obj"
    elif isinstance(arg, schema.ArgumentAsStringToArgument):
        for key, sub in arg.as_string_to_argument.items():
            yield from references(sub, path + pointer(["as_string_to_argument", key]))
    else:
        yield from _symbolic_references(arg, path)


_SYMBOLIC_ARMS: tuple[tuple[type[schema.Arm], str, Kind, bool], ...] = (
    (schema.ArgumentAsSymInt, "as_sym_int", "sym_int", False),
    (schema.ArgumentAsSymInts, "as_sym_ints", "sym_int", True),
    (schema.ArgumentAsSymBool, "as_sym_bool", "sym_bool", False),
    (schema.ArgumentAsSymBools, "as_sym_bools", "sym_bool", True),
    (schema.ArgumentAsSymFloat, "as_sym_float", "sym_float", False),
    (schema.ArgumentAsSymFloats, "as_sym_floats", "sym_float", True),
)
_NAME_ARMS = (
    schema.SymIntArgumentAsName,
    schema.SymBoolArgumentAsName,
    schema.SymFloatArgumentAsName,
)


def _symbolic_references(arg: Any, path: str) -> Iterator[tuple[str, str, Kind]]:
    for arm, key, kind, many in _SYMBOLIC_ARMS:
        if isinstance(arg, arm):
            items = list(enumerate(arg.value)) if many else [(None, arg.value)]
            for i, item in items:
                if isinstance(item, _NAME_ARMS):
                    where = f"{path}/{key}" if i is None else f"{path}/{key}/{i}"
                    yield item.as_name, f"{where}/as_name", kind
            return


def sym_exprs(graph: schema.Graph, path: str) -> Iterator[tuple[str, str]]:
    """Every SymExpr string a graph's value metadata holds, with a pointer to `expr_str`."""
    for name, meta in graph.tensor_values.items():
        where = path + pointer(["tensor_values", name])
        for field, values in (("sizes", meta.sizes), ("strides", meta.strides)):
            for i, value in enumerate(values):
                if isinstance(value, schema.SymIntAsExpr):
                    yield value.as_expr.expr_str, f"{where}/{field}/{i}/as_expr/expr_str"
        if isinstance(meta.storage_offset, schema.SymIntAsExpr):
            yield meta.storage_offset.as_expr.expr_str, f"{where}/storage_offset/as_expr/expr_str"
    tables: tuple[tuple[str, Mapping[str, Any]], ...] = (
        ("sym_int_values", graph.sym_int_values),
        ("sym_bool_values", graph.sym_bool_values),
        ("sym_float_values", graph.sym_float_values),
    )
    for table, entries in tables:
        for name, value in entries.items():
            if isinstance(
                value, schema.SymIntAsExpr | schema.SymBoolAsExpr | schema.SymFloatAsExpr
            ):
                yield value.as_expr.expr_str, path + pointer([table, name, "as_expr", "expr_str"])


# ---------------------------------------------------------------- semantics


class _Semantics:
    """The semantic rules over one document; findings go to `found`."""

    def __init__(
        self,
        doc: schema.ExportedProgram,
        graphs: Sequence[tuple[schema.Graph, str]],
        tensors: Mapping[str, schema.TensorMeta] | None,
        found: FindingList,
    ) -> None:
        self.doc = doc
        self.graphs = graphs
        self.tensors = tensors
        self.found = found

    def error(self, code: str, path: str, message: str) -> None:
        self.found.add(code, "error", path, message)

    def run(self) -> None:
        top: set[str] = set()
        symbols: set[str] = set()
        for graph, path in self.graphs:
            defined = self.graph(graph, path)
            if path == _GRAPH:
                top = defined
            for text, _ in sym_exprs(graph, path):
                try:
                    symbols |= check_expression(text).symbols
                except UnsafeExpression:
                    continue  # the screen reports it
        self.signature()
        if self.tensors is not None:
            self.weights(self.tensors)
        self.ranges(symbols)
        self.call_graph(top)
        check_operators(self.graphs, self.found)
        self.version()
        if "aten" not in self.doc.opset_version:
            self.error("opset-missing", "/opset_version", "opset_version has no 'aten' entry")

    def version(self) -> None:
        # torch refuses any other major, except 0.0 (written before versions were)
        declared = self.doc.schema_version
        if declared.major != schema.CURRENT[0] and (declared.major, declared.minor) != (0, 0):
            self.error(
                "schema-version-unsupported",
                "/schema_version/major",
                f"schema major {declared.major}: torch reads {schema.CURRENT[0]}.x documents only",
            )

    # ------------------------------------------------------------ names

    def graph(self, graph: schema.Graph, path: str) -> set[str]:
        """Names defined exactly once and before use; metadata for every definition."""
        nodes: set[str] = set()
        for i, node in enumerate(graph.nodes):
            # torch names the node it builds after `name` (unset or "" in older documents) and
            # gives a taken name a suffix: it loads, but not under the name written
            if node.name:
                if node.name in nodes:
                    self.found.add(
                        "node-name-redefined",
                        "warning",
                        f"{path}/nodes/{i}/name",
                        f"another node of this graph is already named {node.name!r}; torch "
                        "renames this one when loading",
                    )
                nodes.add(node.name)
        first: dict[str, int] = {}
        for arg in graph.inputs:
            for name, _, _ in references(arg, ""):
                first.setdefault(name, -1)
        for i, node in enumerate(graph.nodes):
            for out in node.outputs:
                for name, _, _ in references(out, ""):
                    first.setdefault(name, i)
        tables: dict[Kind, tuple[str, Mapping[str, Any]]] = {
            "tensor": ("tensor_values", graph.tensor_values),
            "sym_int": ("sym_int_values", graph.sym_int_values),
            "sym_bool": ("sym_bool_values", graph.sym_bool_values),
            "sym_float": ("sym_float_values", graph.sym_float_values),
        }
        defined: set[str] = set()
        for j, arg in enumerate(graph.inputs):
            for name, at, kind in references(arg, f"{path}/inputs/{j}"):
                self.define(tables, defined, name, at, kind)
        for i, node in enumerate(graph.nodes):
            here = f"{path}/nodes/{i}"
            for j, named in enumerate(node.inputs):
                for name, at, _ in references(named.arg, f"{here}/inputs/{j}/arg"):
                    self.use(defined, first, name, at)
            for k, out in enumerate(node.outputs):
                for name, at, kind in references(out, f"{here}/outputs/{k}"):
                    self.define(tables, defined, name, at, kind)
        for j, arg in enumerate(graph.outputs):
            for name, at, _ in references(arg, f"{path}/outputs/{j}"):
                self.use(defined, first, name, at)
        return defined

    def define(
        self,
        tables: Mapping[Kind, tuple[str, Mapping[str, Any]]],
        defined: set[str],
        name: str,
        at: str,
        kind: Kind,
    ) -> None:
        if name in defined:
            self.error("name-redefined", at, f"{name!r} is already defined in this graph")
            return
        defined.add(name)
        if kind not in tables:
            return
        table, values = tables[kind]
        if name not in values:
            code = "tensor-meta-missing" if kind == "tensor" else "sym-meta-missing"
            self.error(code, at, f"{name!r} has no entry in this graph's {table}")

    def use(self, defined: set[str], first: dict[str, int], name: str, at: str) -> None:
        if name in defined:
            return
        if name in first:
            self.error("name-used-before-definition", at, f"{name!r} is only defined later")
        else:
            self.error("name-undefined", at, f"{name!r} is not defined in this graph")

    # ------------------------------------------------------------ signature

    def signature(self) -> None:
        graph = self.doc.graph_module.graph
        specs = self.doc.graph_module.signature
        self.pair(
            "signature-input-mismatch",
            graph.inputs,
            specs.input_specs,
            "inputs",
            _INPUT_SPECS,
            _input_matches,
        )
        self.pair(
            "signature-output-mismatch",
            graph.outputs,
            specs.output_specs,
            "outputs",
            _OUTPUT_SPECS,
            _output_matches,
        )

    def pair(
        self,
        code: str,
        args: list[Any],
        specs: list[Any],
        side: str,
        base: str,
        matches: Callable[[Any, Any], bool],
    ) -> None:
        for i in range(max(len(args), len(specs))):
            if i >= len(specs):
                self.error(code, f"{_GRAPH}/{side}/{i}", f"graph {side[:-1]} {i} has no spec")
            elif i >= len(args):
                self.error(code, f"{base}/{i}", f"spec {i} has no graph {side[:-1]}")
            elif not matches(specs[i], args[i]):
                self.error(
                    code,
                    f"{base}/{i}",
                    f"spec {i} ({specs[i].kind}) does not describe graph {side[:-1]} {i} "
                    f"({_describe(args[i])})",
                )

    # ------------------------------------------------------------ weights

    def weights(self, tensors: Mapping[str, schema.TensorMeta]) -> None:
        graph = self.doc.graph_module.graph
        used: set[str] = set()
        for i, spec in enumerate(self.doc.graph_module.signature.input_specs):
            bound = _bound_tensor(spec)
            if bound is None:
                continue
            fqn, arg_name, field = bound
            at = f"{_INPUT_SPECS}/{i}/{spec.kind}/{field}"
            used.add(fqn)
            stored = tensors.get(fqn)
            if stored is None:
                self.error("weight-missing", at, f"{fqn!r} is not among the archive's tensors")
                continue
            meta = graph.tensor_values.get(arg_name)
            if meta is None:
                continue
            if meta.dtype != stored.dtype or _shape(meta) != _shape(stored):
                self.error(
                    "weight-mismatch",
                    at,
                    f"{fqn!r}: the graph has {meta.dtype.name}{_shape(meta)}, "
                    f"the archive {stored.dtype.name}{_shape(stored)}",
                )
        for fqn in tensors:
            if fqn not in used:
                self.found.add(
                    "weight-unused",
                    "warning",
                    "",
                    f"archive tensor {fqn!r} is not in the signature",
                )

    # ------------------------------------------------------------ ranges and call graph

    def ranges(self, symbols: set[str]) -> None:
        for key, constraint in self.doc.range_constraints.items():
            at = pointer(["range_constraints", key])
            try:
                named = check_expression(key).symbols
            except UnsafeExpression:
                continue  # the screen reports it
            missing = sorted(named - symbols) if named else [key]
            if missing:
                self.error(
                    "range-unknown-symbol",
                    at,
                    f"{', '.join(missing)} does not occur in the graph's shapes or values",
                )
            low, high = constraint.min_val, constraint.max_val
            if low is not None and high is not None and low > high:
                self.error("range-empty", at, f"min_val {low} is above max_val {high}")

    def call_graph(self, top: set[str]) -> None:
        entries = self.doc.graph_module.module_call_graph
        code = "module-call-graph-invalid"
        if not entries:
            self.error(code, _CALL_GRAPH, "the module call graph has no root entry")
            return
        if entries[0].fqn != "":
            self.error(code, f"{_CALL_GRAPH}/0/fqn", "the first entry must be the root (fqn '')")
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            if entry.fqn in seen:
                self.error(code, f"{_CALL_GRAPH}/{i}/fqn", f"fqn {entry.fqn!r} appears twice")
            seen.add(entry.fqn)
            if entry.signature is None:
                continue
            sides = (("inputs", entry.signature.inputs), ("outputs", entry.signature.outputs))
            for side, args in sides:
                for j, arg in enumerate(args):
                    where = f"{_CALL_GRAPH}/{i}/signature/{side}/{j}"
                    for name, at, _ in references(arg, where):
                        if name not in top:
                            self.error(code, at, f"{name!r} is not a value of the graph")


def _input_matches(spec: Any, arg: Any) -> bool:
    if isinstance(spec, schema.InputSpecUserInput):
        return _same(spec.user_input.arg, arg)
    if isinstance(spec, schema.InputSpecCustomObj):
        return (
            isinstance(arg, schema.ArgumentAsCustomObj)
            and arg.as_custom_obj.name == spec.custom_obj.arg.name
        )
    if isinstance(spec, schema.InputSpecConstantInput):
        value = spec.constant_input.value
        return arg.kind == value.kind and _same_scalar(arg.value, value.value)
    name = spec.value.arg.name
    return isinstance(arg, schema.ArgumentAsTensor) and arg.as_tensor.name == name


def _output_matches(spec: Any, arg: Any) -> bool:
    if isinstance(spec, schema.OutputSpecUserOutput):
        return _same(spec.user_output.arg, arg)
    name = spec.value.arg.name
    return isinstance(arg, schema.ArgumentAsTensor) and arg.as_tensor.name == name


def _same(a: BaseModel, b: BaseModel) -> bool:
    # NaN != NaN, but a NaN constant still describes the same output
    return a == b or schema.dump(a) == schema.dump(b)


def _same_scalar(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _describe(arg: Any) -> str:
    names = [name for name, _, _ in references(arg, "")]
    return f"{arg.kind} {', '.join(names)}" if names else str(arg.kind)


def _bound_tensor(spec: Any) -> tuple[str, str, str] | None:
    """(fully qualified name, graph input name, name field) of a spec bound to a stored tensor."""
    if isinstance(spec, schema.InputSpecParameter):
        p = spec.parameter
        return p.parameter_name, p.arg.name, "parameter_name"
    if isinstance(spec, schema.InputSpecBuffer):
        b = spec.buffer
        return b.buffer_name, b.arg.name, "buffer_name"
    if isinstance(spec, schema.InputSpecTensorConstant):
        c = spec.tensor_constant
        return c.tensor_constant_name, c.arg.name, "tensor_constant_name"
    return None


def _shape(meta: schema.TensorMeta) -> list[int | str]:
    return [
        s.as_int if isinstance(s, schema.SymIntAsInt) else s.as_expr.expr_str for s in meta.sizes
    ]


# ---------------------------------------------------------------- schema history


_NO_DEFAULT = object()


@dataclass(frozen=True)
class _Plan:
    """What the history walk needs of one model class."""

    #: per field: name, the version it appeared in, and its default (or _NO_DEFAULT)
    fields: tuple[tuple[str, schema.Version, object], ...]
    #: the newest struct, field or arm version reachable below the class, enum values aside
    ceiling: schema.Version
    #: fields holding an enum value directly
    enum_fields: tuple[str, ...]
    #: whether enums also occur deeper than the direct fields
    deep_enums: bool


def _types_in(annotation: Any) -> Iterator[type]:
    stack = [annotation]
    while stack:
        t = stack.pop()
        if isinstance(t, type) and issubclass(t, BaseModel | IntEnum):
            yield t
        else:
            stack.extend(typing.get_args(t))


def _field_types(model: type[BaseModel]) -> dict[str, list[type]]:
    return {
        name: list(_types_in(field_annotation(info))) for name, info in model.model_fields.items()
    }


@functools.cache
def _plan(model: type[BaseModel]) -> _Plan:
    fields = []
    for name, info in model.model_fields.items():
        if info.default_factory is not None:
            default = info.default_factory()  # type: ignore[call-arg]
        elif info.default is PydanticUndefined:
            default = _NO_DEFAULT
        else:
            default = info.default
        fields.append((name, field_wire(info).since, default))
    direct = _field_types(model)
    enum_fields = tuple(n for n, ts in direct.items() if any(issubclass(t, IntEnum) for t in ts))
    seen: set[type[BaseModel]] = {model}
    stack = [t for ts in direct.values() for t in ts if issubclass(t, BaseModel)]
    ceiling: schema.Version = max([getattr(model, "__since__", FLOOR), *(f[1] for f in fields)])
    deep_enums = False
    while stack:
        nested = stack.pop()
        if nested in seen:
            continue
        seen.add(nested)
        ceiling = max(ceiling, getattr(nested, "__since__", FLOOR))
        for info in nested.model_fields.values():
            ceiling = max(ceiling, field_wire(info).since)
        for types in _field_types(nested).values():
            for t in types:
                if issubclass(t, IntEnum):
                    deep_enums = True
                elif issubclass(t, BaseModel):
                    stack.append(t)
    return _Plan(tuple(fields), ceiling, enum_fields, deep_enums)


def _enum_since(value: IntEnum) -> schema.Version:
    since, value_since = ENUMS[type(value)]
    return value_since.get(value, since)


_NESTED = (BaseModel, list, dict, IntEnum)


def schema_floor(doc: BaseModel) -> schema.Version:
    """The newest schema version among the fields (set, not default), arms and enum values used."""
    best = FLOOR
    stack: list[object] = [doc]
    while stack and best < schema.CURRENT:
        value = stack.pop()
        if isinstance(value, BaseModel):
            plan = _plan(type(value))
            if plan.ceiling <= best and not plan.deep_enums:
                # nothing below can raise the floor but the enum values held right here
                for name in plan.enum_fields:
                    stack.append(getattr(value, name))
                continue
            best = max(best, getattr(type(value), "__since__", FLOOR))
            for name, since, default in plan.fields:
                item = getattr(value, name)
                if default is _NO_DEFAULT or item != default:
                    best = max(best, since)
                    if isinstance(item, _NESTED):
                        stack.append(item)
        elif isinstance(value, list):
            stack.extend([item for item in value if isinstance(item, _NESTED)])
        elif isinstance(value, dict):
            stack.extend([item for item in value.values() if isinstance(item, _NESTED)])
        elif isinstance(value, IntEnum):
            best = max(best, _enum_since(value))
    return best


def oldest_release(version: schema.Version) -> str:
    """The oldest torch release that writes `version` or a newer one ("" if none does)."""
    newer = [v for v in schema.RELEASES if v >= version]
    return schema.RELEASES[min(newer)][0] if newer else ""
