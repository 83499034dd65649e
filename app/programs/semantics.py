"""The semantic rules of a document: names defined once and before use with their metadata,
the signature against the graph, weights, ranges, the module call graph, operator calls."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

import schema
from app.archive.tensors import dtype_name
from app.programs.expr import UnsafeExpression, check_expression, is_symbol_name
from app.programs.findings import FindingList
from app.programs.graph import (
    TOP_GRAPH,
    VALUE_MAPS,
    GraphSite,
    Ref,
    references,
    scope,
    sym_exprs,
    walk_graphs,
)
from app.programs.opcheck import check_operators
from app.releases import judging
from schema.errors import pointer

_GRAPH = TOP_GRAPH
_INPUT_SPECS = "/graph_module/signature/input_specs"
_OUTPUT_SPECS = "/graph_module/signature/output_specs"
_CALL_GRAPH = "/graph_module/module_call_graph"


def check_semantics(
    doc: schema.ExportedProgram,
    graphs: list[GraphSite],
    tensors: Mapping[str, schema.TensorMeta] | None,
    found: FindingList,
) -> None:
    """Apply every semantic rule to `doc` (whose graphs are `graphs`); findings go to `found`."""
    _Semantics(doc, graphs, tensors, found).run()


class _Semantics:
    """The semantic rules over one document; findings go to `found`."""

    def __init__(
        self,
        doc: schema.ExportedProgram,
        graphs: list[GraphSite],
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
        for graph, path, _, _ in self.graphs:
            defined = self.graph(graph, path)
            if path == _GRAPH:
                top = defined
        self.signature()
        if self.tensors is not None:
            self.weights(self.tensors)
        self.ranges()
        self.call_graph(top)
        check_operators(self.graphs, self.found, judging(self.doc.torch_version)[0])
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
        defined: set[str] = set()
        for ref in scope(graph):
            if ref.defines:
                self.define(graph, ref, path)
                defined.add(ref.name)
            elif ref.status != "ok":
                self.use(ref, path)
        return defined

    def define(self, graph: schema.Graph, ref: Ref, path: str) -> None:
        if ref.status == "redefined":
            at = ref.pointer(path)
            self.error("name-redefined", at, f"{ref.name!r} is already defined in this graph")
            return
        if ref.kind == "custom_obj":
            return  # torch keeps no metadata it would need of a script object
        table = VALUE_MAPS[ref.kind]
        if ref.name not in getattr(graph, table):
            code = "tensor-meta-missing" if ref.kind == "tensor" else "sym-meta-missing"
            at = ref.pointer(path)
            self.error(code, at, f"{ref.name!r} has no entry in this graph's {table}")

    def use(self, ref: Ref, path: str) -> None:
        if ref.status == "later":
            at = ref.pointer(path)
            self.error("name-used-before-definition", at, f"{ref.name!r} is only defined later")
        elif ref.status == "undefined":
            at = ref.pointer(path)
            self.error("name-undefined", at, f"{ref.name!r} is not defined in this graph")

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
                    f"{fqn!r}: the graph has {dtype_name(meta.dtype)}{_shape(meta)}, "
                    f"the archive {dtype_name(stored.dtype)}{_shape(stored)}",
                )
        for fqn in tensors:
            if fqn not in used:
                self.found.add(
                    "weight-unused",
                    "warning",
                    "",
                    f"archive tensor {fqn!r} is not in the signature: torch.export.load keeps "
                    "it, with the weights or the constants as stored, and so does deserialize",
                )

    # ------------------------------------------------------------ ranges and call graph

    def ranges(self) -> None:
        dropped = set(unused_ranges(self.doc, self.graphs))
        for key, constraint in self.doc.range_constraints.items():
            at = pointer(["range_constraints", key])
            if key in dropped:
                self.found.add(
                    "range-unknown-symbol",
                    "warning",
                    at,
                    f"{key} does not occur in the graph's shapes or values: torch's loader "
                    "drops this range (and so does deserialize)",
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


def unused_ranges(
    doc: schema.ExportedProgram, graphs: Sequence[GraphSite] | None = None
) -> list[str]:
    """The range_constraints keys torch's loader drops ("Symbol ... did not appear in the graph").

    torch 2.13 keeps a range only when its key is the text of an expression, or of a subterm of
    one, that it parsed from the graphs' value metadata. A symbol key is kept exactly when the
    metadata names the symbol: unbacked symbols proven constant (a `.item()` fed to `view`),
    or the second symbol of a strict `nonzero`, keep a range but leave the graph. A derived
    key (`s17 + 1`, from a derived Dim) is the printed form of a term torch writes in another
    form (`Add(Symbol('s17', ...), Integer(1))`): it is dropped when it names a symbol the
    metadata does not (no term could hold it) and kept otherwise, as torch keeps the derived
    ranges it writes, whose term is some input's size. `graphs` is
    `list(walk_graphs(doc.graph_module.graph))` when the caller has it. A key the expression
    checker refuses is left to the screen.
    """
    if not doc.range_constraints:
        return []
    symbols: set[str] = set()
    texts: set[str] = set()
    for graph, path, _, _ in walk_graphs(doc.graph_module.graph) if graphs is None else graphs:
        for text, _ in sym_exprs(graph, path):
            texts.add(text)
            try:
                symbols |= check_expression(text).symbols
            except UnsafeExpression:
                continue  # the screen reports it
    dropped: list[str] = []
    for key in doc.range_constraints:
        try:
            named = check_expression(key).symbols
        except UnsafeExpression:
            continue
        kept = (
            key in symbols
            if is_symbol_name(key)
            else key in texts or bool(named) and named <= symbols
        )
        if not kept:
            dropped.append(key)
    return dropped


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
