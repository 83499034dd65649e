"""Canonical form of a document: torch 2.13's ``canonicalize()`` rules, and its canonical bytes.

The rules (torch/_export/serde/serialize.py, ``canonicalize`` and ``_canonicalize_graph``):

- graph inputs and their specs are ordered by kind (token, parameter, buffer, tensor constant,
  custom object, user input, constant input), then by target name, then by position; outputs
  likewise (token, parameter/buffer mutation, user input mutation, user/loss output, gradients);
- nodes are sorted topologically; among ready nodes the smallest
  ``(target, [(input name, [rank of each referenced value]), ...], position)`` goes first, where
  a value's rank is the order it was defined in (inputs first) and -1 for a constant or a
  non-name leaf;
- every value defined by a graph input or node output is renamed ``_0, _1, ...`` in that order,
  in the references and in the value maps; subgraphs are canonicalized on their own and renamed
  ``_g0, _g1, ...``; node metadata, the graph module's metadata and namedtuple fields are dropped;
- value maps, ``opset_version`` and ``range_constraints`` are sorted by key, ``guards_code``
  sorted, ``module_call_graph`` sorted by fqn.

torch's quirks are kept on purpose so that our canonical form equals torch's: values inside
``as_string_to_argument`` are neither ordered nor renamed, a ``custom_obj`` user input spec
keeps its old name, node names and module call signatures keep the old value names. Where torch
crashes on a valid document (an ``as_optional_tensor`` argument, a graph without outputs,
non-tensor user specs such as ``as_sym_bool``) we extend the rules in the obvious way.

One deliberate difference: torch renames the value maps in place, one entry at a time, so when
a document already uses names such as ``_3`` for other values, a renamed entry overwrites
another one and metadata is lost (and torch's output no longer canonicalizes). We rename all at
once; on every document without such a collision the result is torch's.

Where the document itself is broken (duplicate or undefined values, a cycle, missing value
metadata, specs that do not match the graph) a `CanonicalFailure` says so.

Unknown keys from a newer schema minor are kept where they are. The result shares the input's
unchanged sub-models; the input is never mutated.

`stable_form` is the form a program's digest names: the canonical form with what torch's own
``torch.export.load`` + ``torch.export.save`` does not keep settled, so that every round trip
through torch (or through us, who write what torch would) gives the same bytes:

- a size or stride whose expression always equals one int over the symbols' ranges is that
  int: the loader parses it with sympy, which simplifies what it can prove, and the saver
  writes a number as an int (`app.programs.intervals`);
- each value's ``storage_offset`` is 0: the loader makes every value's fake tensor with
  ``empty_strided`` from sizes and strides alone (``deserialize_tensor_meta``), so an offset
  written at export (a slice of a fused qkv, an unbacked ``u0 - 1``) is never read back;
- a range whose symbol the graph no longer names is dropped, as the loader drops it
  (`app.programs.semantics.unused_ranges`; an unbacked symbol only an offset named goes too);
- node names are left out: the loader renames nodes (``<target>_unused`` for one whose output
  is none, fx's de-duplicating suffixes), no value refers to a node by name, and the canonical
  names of the values the nodes define are kept;
- ``torch_version`` is left out: a load + save under another torch writes its own.

What the digest must still tell apart (an operator, an argument, a shape, a dtype, a stride,
a weight) is untouched.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from app.failure import Failure, ProblemCode
from app.programs.bounds import digit_runs
from app.programs.graph import VALUE_MAPS, leaves, scope
from app.programs.intervals import constant_value
from app.programs.rename import copy_model, new_arm, renamed, with_field
from app.programs.semantics import unused_ranges
from schema import Issue, dump
from schema.errors import pointer
from schema.io import dump_sorted, no_cycle_collection
from schema.models import (
    ArgumentAsBool,
    ArgumentAsCustomObj,
    ArgumentAsFloat,
    ArgumentAsGraph,
    ArgumentAsInt,
    ArgumentAsNone,
    ArgumentAsString,
    ExportedProgram,
    Graph,
    InputSpecBuffer,
    InputSpecConstantInput,
    InputSpecCustomObj,
    InputSpecParameter,
    InputSpecTensorConstant,
    InputSpecToken,
    InputSpecUserInput,
    Node,
    OutputSpecBufferMutation,
    OutputSpecGradientToParameter,
    OutputSpecGradientToUserInput,
    OutputSpecLossOutput,
    OutputSpecParameterMutation,
    OutputSpecToken,
    OutputSpecUserInputMutation,
    OutputSpecUserOutput,
    RangeConstraint,
    SymIntAsExpr,
    SymIntAsInt,
    TensorMeta,
)

__all__ = ["CanonicalFailure", "canonical_bytes", "canonicalize", "settle", "stable_form"]

M = TypeVar("M", bound=BaseModel)
_Path = list[str | int]

_VALUE_MAPS = tuple(VALUE_MAPS.values())
_MISSING: Any = object()


class CanonicalFailure(Failure):
    """A document that cannot be put in canonical form (it is not a well-formed graph)."""


# ---------------------------------------------------------------- one graph


def _fail(code: ProblemCode, issues: list[Issue]) -> CanonicalFailure:
    first = issues[0]
    more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
    return CanonicalFailure(code, f"{first.path or '/'}: {first.message}{more}", issues)


def _check_scope(
    graph: Graph, inputs: Iterable[tuple[int, Any]], constants: frozenset[str], path: _Path
) -> None:
    """Fail on a value defined twice, or read by a node and never defined; a value defined
    only after its use is fine (the nodes are about to be sorted)."""
    at = pointer(path)
    duplicates: list[Issue] = []
    undefined: list[Issue] = []
    for ref in scope(graph, leaves, inputs):
        if ref.defines and ref.status == "redefined":
            what = "graph input" if ref.node is None else "value"
            message = f"{what} {ref.name!r} is defined twice"
            duplicates.append(Issue("duplicate-value", ref.argument(at), message))
        elif ref.status == "undefined" and ref.node is not None and ref.name not in constants:
            message = f"value {ref.name!r} is used but never defined"
            undefined.append(Issue("undefined-value", ref.argument(at), message))
    if duplicates:
        raise _fail("duplicate-value", duplicates)
    if undefined:
        raise _fail("undefined-value", undefined)


def _names(args: Iterable[Any]) -> Iterator[str]:
    for arg in args:
        for leaf in leaves(arg):
            if leaf.name:
                yield leaf.name


class _Order:
    """torch's topological sort of a graph's nodes: its heap with its tie-breaks."""

    def __init__(self, inputs: list[Any], nodes: list[Node], constants: frozenset[str]) -> None:
        self.nodes = nodes
        self.constants = constants
        #: the order each value was defined in (inputs first); the heap key ranks uses by it
        self.rank = {name: i for i, name in enumerate(_names(inputs))}
        producer = {name: i for i, node in enumerate(nodes) for name in _names(node.outputs)}
        self.users: list[list[int]] = [[] for _ in nodes]
        self.pending = [0] * len(nodes)
        self.uses = [[leaves(named.arg) for named in node.inputs] for node in nodes]
        for i, node_uses in enumerate(self.uses):
            for name, _, _ in (leaf for arg in node_uses for leaf in arg):
                src = producer.get(name) if name and name not in constants else None
                if src is not None:
                    self.users[src].append(i)
                    self.pending[i] += 1

    def key(self, idx: int) -> tuple[str, list[tuple[str, list[int]]], int]:
        node = self.nodes[idx]
        rank, constants = self.rank, self.constants
        ranks = [
            (named.name, [rank[n] if n and n not in constants else -1 for n, _, _ in args])
            for named, args in zip(node.inputs, self.uses[idx], strict=True)
        ]
        return (node.target, ranks, idx)

    def sorted(self, path: _Path) -> list[int]:
        """Node positions in torch's order; fails on a cycle."""
        ready = [self.key(idx) for idx, count in enumerate(self.pending) if count == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            idx = heapq.heappop(ready)[2]
            order.append(idx)
            for name in _names(self.nodes[idx].outputs):
                self.rank[name] = len(self.rank)
            for user in self.users[idx]:
                self.pending[user] -= 1
                if self.pending[user] == 0:
                    heapq.heappush(ready, self.key(user))
        if len(order) != len(self.nodes):
            raise _fail(
                "graph-cycle",
                [
                    Issue(
                        "graph-cycle",
                        pointer([*path, "nodes", idx]),
                        f"node {self.nodes[idx].target!r} is on a dependency cycle or after one",
                    )
                    for idx, count in enumerate(self.pending)
                    if count
                ],
            )
        return order


def _new_names(
    graph: Graph, defined: Iterable[tuple[Any, _Path]]
) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """The renames (``_0, _1, ...`` in order of definition) and the value maps under the new
    names; entries nothing defines keep their names, as in torch, unless a new name took it:
    a stale entry must not shadow a renamed value (torch's in-place rename mixes them)."""
    table: dict[str, str] = {}
    maps: dict[str, dict[str, Any]] = {field: {} for field in _VALUE_MAPS}
    moved: dict[str, set[str]] = {field: set() for field in _VALUE_MAPS}
    for arg, where in defined:
        for name, kind, _ in leaves(arg):
            if name is None:
                continue
            new = table[name] = f"_{len(table)}"
            field = VALUE_MAPS[kind]
            meta = getattr(graph, field).get(name, _MISSING)
            if meta is _MISSING:
                message = f"{name!r} has no entry in {field}"
                raise _fail(
                    "missing-value-meta", [Issue("missing-value-meta", pointer(where), message)]
                )
            maps[field][new] = meta
            moved[field].add(name)
    for field, new_map in maps.items():
        for name, meta in getattr(graph, field).items():
            if name not in moved[field] and name not in new_map:
                new_map[name] = meta
    return table, maps


def _canonical_graph(
    inputs: list[Any],
    positions: list[int],
    outputs: list[Any],
    graph: Graph,
    constants: frozenset[str],
    path: _Path,
) -> tuple[Graph, dict[str, str]]:
    """Canonicalize one graph whose inputs/outputs come already ordered; returns the renames.

    `positions` are the inputs' places in the document, for the paths of failures.
    """
    nodes = graph.nodes
    _check_scope(graph, zip(positions, inputs, strict=True), constants, path)
    order = _Order(inputs, nodes, constants).sorted(path)
    table, maps = _new_names(
        graph,
        itertools.chain(
            ((arg, [*path, "inputs", i]) for i, arg in zip(positions, inputs, strict=True)),
            (
                (arg, [*path, "nodes", idx, "outputs", o])
                for idx in order
                for o, arg in enumerate(nodes[idx].outputs)
            ),
        ),
    )
    update: dict[str, Any] = {
        field: dict(sorted(values.items(), key=itemgetter(0))) for field, values in maps.items()
    }
    update["inputs"] = [renamed(a, table) for a in inputs]
    update["outputs"] = [renamed(a, table) for a in outputs]
    update["nodes"] = _canonical_nodes(nodes, order, table, constants, path)
    return copy_model(graph, update), table


def _canonical_nodes(
    nodes: list[Node],
    order: list[int],
    table: dict[str, str],
    constants: frozenset[str],
    path: _Path,
) -> list[Node]:
    """The nodes in `order`, values renamed, metadata dropped, subgraphs canonical as ``_g<n>``."""
    new_nodes: list[Node] = []
    subgraphs = 0
    for idx in order:
        node = nodes[idx]
        new_inputs = []
        for i, named in enumerate(node.inputs):
            arg = named.arg
            if type(arg) is ArgumentAsGraph:
                sub = arg.as_graph
                sub_graph, _ = _canonical_graph(
                    sub.graph.inputs,
                    list(range(len(sub.graph.inputs))),
                    sub.graph.outputs,
                    sub.graph,
                    constants,
                    [*path, "nodes", idx, "inputs", i, "arg", "as_graph", "graph"],
                )
                new_sub = copy_model(sub, {"name": f"_g{subgraphs}", "graph": sub_graph})
                subgraphs += 1
                new_arg: Any = new_arm(ArgumentAsGraph, "as_graph", new_sub)
            else:
                new_arg = renamed(arg, table)
            new_inputs.append(named if new_arg is arg else with_field(named, "arg", new_arg))
        outputs = [renamed(o, table) for o in node.outputs]
        new_nodes.append(
            copy_model(node, {"inputs": new_inputs, "outputs": outputs, "metadata": {}})
        )
    return new_nodes


# ---------------------------------------------------------------- signature


#: torch's ``rank_input``: (kind rank, target name) per InputSpec arm; position breaks ties.
_INPUT_RANK: dict[type[BaseModel], Callable[[Any], tuple[int, str | None]]] = {
    InputSpecToken: lambda s: (0, None),
    InputSpecParameter: lambda s: (1, s.parameter.parameter_name),
    InputSpecBuffer: lambda s: (2, s.buffer.buffer_name),
    InputSpecTensorConstant: lambda s: (3, s.tensor_constant.tensor_constant_name),
    InputSpecCustomObj: lambda s: (4, s.custom_obj.custom_obj_name),
    InputSpecUserInput: lambda s: (5, None),
    InputSpecConstantInput: lambda s: (6, s.constant_input.name),
}

#: torch's ``rank_output``.
_OUTPUT_RANK: dict[type[BaseModel], Callable[[Any], tuple[int, str | None]]] = {
    OutputSpecToken: lambda s: (0, None),
    OutputSpecParameterMutation: lambda s: (1, s.parameter_mutation.parameter_name),
    OutputSpecBufferMutation: lambda s: (2, s.buffer_mutation.buffer_name),
    OutputSpecUserInputMutation: lambda s: (3, None),
    OutputSpecUserOutput: lambda s: (4, None),
    OutputSpecLossOutput: lambda s: (4, None),
    OutputSpecGradientToParameter: lambda s: (5, s.gradient_to_parameter.parameter_name),
    OutputSpecGradientToUserInput: lambda s: (6, None),
}

#: User spec arguments torch leaves untouched (no value behind them, or torch's choice).
_KEEP_USER_INPUT = (
    ArgumentAsNone,
    ArgumentAsBool,
    ArgumentAsInt,
    ArgumentAsFloat,
    ArgumentAsString,
    ArgumentAsCustomObj,
)
_KEEP_USER_OUTPUT = (
    ArgumentAsNone,
    ArgumentAsBool,
    ArgumentAsInt,
    ArgumentAsFloat,
    ArgumentAsString,
)


class _Specs:
    """Renames the values a signature spec refers to; every name must be a renamed value."""

    def __init__(self, table: dict[str, str], path: _Path) -> None:
        self.table = table
        self.path = path

    def name(self, old: str, where: _Path) -> str:
        new = self.table.get(old)
        if new is None:
            raise _fail(
                "unknown-spec-value",
                [
                    Issue(
                        "unknown-spec-value",
                        pointer([*self.path, *where]),
                        f"{old!r} is not a graph input or node output",
                    )
                ],
            )
        return new

    def ref(self, model: M, field: str, where: _Path) -> M:
        return with_field(model, field, self.name(getattr(model, field), [*where, field]))

    def user_arg(self, arg: Any, keep: tuple[type[BaseModel], ...], where: _Path) -> Any:
        if isinstance(arg, keep):
            return arg
        for name, _, _ in leaves(arg):
            if name is not None:
                self.name(name, where)
        return renamed(arg, self.table)

    def spec(self, spec: Any, where: _Path) -> Any:
        """The spec with its values renamed (its arm kind decides which fields refer to values)."""
        tag: str = spec.__tag__
        body = spec.value
        at = [*where, tag]
        if tag == "constant_input":
            return spec
        if tag in ("user_input", "user_output"):
            keep = _KEEP_USER_INPUT if tag == "user_input" else _KEEP_USER_OUTPUT
            new_body = with_field(body, "arg", self.user_arg(body.arg, keep, [*at, "arg"]))
        else:
            new_body = with_field(body, "arg", self.ref(body.arg, "name", [*at, "arg"]))
            if tag in ("gradient_to_user_input", "user_input_mutation"):
                new_body = self.ref(new_body, "user_input_name", at)
        return new_arm(type(spec), tag, new_body)


def _ordered(
    pairs: Iterable[tuple[Any, Any]],
    ranks: dict[type[BaseModel], Callable[[Any], tuple[int, str | None]]],
) -> list[tuple[int, Any, Any]]:
    keyed = [(*ranks[type(spec)](spec), idx, arg, spec) for idx, (arg, spec) in enumerate(pairs)]
    keyed.sort(key=itemgetter(0, 1, 2))
    return [(idx, arg, spec) for _, _, idx, arg, spec in keyed]


def canonicalize(doc: ExportedProgram, *, constants: Collection[str] = ()) -> ExportedProgram:
    """The canonical form of `doc` by torch's ``canonicalize()`` rules (a new document).

    `constants` names values torch treats as constants: their uses add no ordering edge and
    rank -1 (torch's ``canonicalize(ep, constants)``; empty by default, as in torch).
    """
    with no_cycle_collection():
        return _canonical_program(doc, frozenset(constants))


def _canonical_program(doc: ExportedProgram, frozen: frozenset[str]) -> ExportedProgram:
    gm = doc.graph_module
    graph = gm.graph
    sig = gm.signature
    issues = [
        Issue(
            "signature-mismatch",
            f"/graph_module/signature/{specs_field}",
            f"the graph has {len(args)} {side} but the signature {len(specs)} {specs_field}",
        )
        for side, args, specs, specs_field in (
            ("inputs", graph.inputs, sig.input_specs, "input_specs"),
            ("outputs", graph.outputs, sig.output_specs, "output_specs"),
        )
        if len(args) != len(specs)
    ]
    if issues:
        raise _fail("signature-mismatch", issues)

    ins = _ordered(zip(graph.inputs, sig.input_specs, strict=True), _INPUT_RANK)
    outs = _ordered(zip(graph.outputs, sig.output_specs, strict=True), _OUTPUT_RANK)
    new_graph, table = _canonical_graph(
        [arg for _, arg, _ in ins],
        [i for i, _, _ in ins],
        [arg for _, arg, _ in outs],
        graph,
        frozen,
        ["graph_module", "graph"],
    )
    specs = _Specs(table, ["graph_module", "signature"])
    new_sig = sig.model_copy(
        update={
            "input_specs": [specs.spec(s, ["input_specs", i]) for i, _, s in ins],
            "output_specs": [specs.spec(s, ["output_specs", i]) for i, _, s in outs],
        }
    )
    new_gm = gm.model_copy(
        update={
            "graph": new_graph,
            "signature": new_sig,
            "module_call_graph": sorted(gm.module_call_graph, key=lambda e: e.fqn),
            "metadata": {},
            "treespec_namedtuple_fields": {},
        }
    )
    return doc.model_copy(
        update={
            "graph_module": new_gm,
            "opset_version": dict(sorted(doc.opset_version.items(), key=itemgetter(0))),
            "range_constraints": dict(sorted(doc.range_constraints.items(), key=itemgetter(0))),
            "verifiers": list(doc.verifiers),
            "guards_code": sorted(doc.guards_code),
        }
    )


# ---------------------------------------------------------------- stable form

_ZERO_OFFSET = SymIntAsInt(as_int=0)


def stable_form(doc: ExportedProgram, *, constants: Collection[str] = ()) -> ExportedProgram:
    """The canonical form with what torch's load + save does not keep settled (see the module's
    docstring): the form the graph digest names."""
    return settle(canonicalize(doc, constants=constants))


def settle(canonical: ExportedProgram) -> ExportedProgram:
    """A canonical form (ours, or torch's own) with what torch's load + save does not keep
    settled; the result is still in canonical form (no order or value name changes)."""
    with no_cycle_collection():
        gm = canonical.graph_module
        metas = _Metas(canonical.range_constraints)
        settled = canonical.model_copy(
            update={
                "graph_module": gm.model_copy(update={"graph": _settled_graph(gm.graph, metas)}),
                "torch_version": "",
            }
        )
        dropped = set(unused_ranges(settled))
        if dropped:
            ranges = {k: v for k, v in settled.range_constraints.items() if k not in dropped}
            settled = with_field(settled, "range_constraints", ranges)
        return settled


class _Metas:
    """Settled TensorMetas: one copy of each shared meta, one answer per expression."""

    def __init__(self, ranges: Mapping[str, RangeConstraint]) -> None:
        self.ranges = ranges
        self.metas: dict[int, TensorMeta] = {}
        self.constants: dict[str, int | None] = {}

    def settled(self, meta: TensorMeta) -> TensorMeta:
        found = self.metas.get(id(meta))
        if found is None:
            found = self.metas[id(meta)] = self._settle(meta)
        return found

    def _settle(self, meta: TensorMeta) -> TensorMeta:
        update: dict[str, Any] = {}
        offset = meta.storage_offset
        if not (isinstance(offset, SymIntAsInt) and offset.as_int == 0):
            update["storage_offset"] = _ZERO_OFFSET
        for field in ("sizes", "strides"):
            values = getattr(meta, field)
            folded = [self._folded(v) for v in values]
            if any(a is not b for a, b in zip(folded, values, strict=True)):
                update[field] = folded
        return copy_model(meta, update) if update else meta

    def _folded(self, value: SymIntAsInt | SymIntAsExpr) -> SymIntAsInt | SymIntAsExpr:
        if isinstance(value, SymIntAsInt):
            return value
        text = value.as_expr.expr_str
        if text not in self.constants:
            self.constants[text] = constant_value(text, self.ranges)
        constant = self.constants[text]
        return value if constant is None else SymIntAsInt(as_int=constant)


def _settled_graph(graph: Graph, metas: _Metas) -> Graph:
    """The graph (subgraphs too) with offsets 0, constant sizes and strides as ints and node
    names left out."""
    nodes = []
    for node in graph.nodes:
        inputs = [
            with_field(
                named,
                "arg",
                new_arm(
                    ArgumentAsGraph,
                    "as_graph",
                    with_field(
                        named.arg.as_graph,
                        "graph",
                        _settled_graph(named.arg.as_graph.graph, metas),
                    ),
                ),
            )
            if type(named.arg) is ArgumentAsGraph
            else named
            for named in node.inputs
        ]
        nodes.append(copy_model(node, {"inputs": inputs, "name": None}))
    values = {name: metas.settled(meta) for name, meta in graph.tensor_values.items()}
    return copy_model(graph, {"nodes": nodes, "tensor_values": values})


# ---------------------------------------------------------------- bytes

#: Integers orjson reads exactly; past them it reads a float. Documents hold int64's bounds
#: (slices to the end), so only the numbers of 19 or more digits are looked at (floats never
#: print that many), and u64's 20 digits are the most an exact one has.
_EXACT = range(-(2**63), 2**64)
_MIN_LONG, _MAX_DIGITS = 19, 20


def canonical_bytes(doc: BaseModel) -> bytes:
    """JSON of `doc` with sorted keys, compact separators, UTF-8, torch's float strings."""
    with no_cycle_collection():
        direct = dump_sorted(doc)
        if direct is not None:
            return direct
        wire = dump(doc)
        if _orjson_exact(wire):
            return orjson.dumps(orjson.loads(wire), option=orjson.OPT_SORT_KEYS)
        try:
            data = _wire_floats(doc.model_dump(mode="json"))
            return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        except TypeError as exc:
            raise CanonicalFailure(
                "integer-out-of-range", f"the document holds an integer beyond 64 bits: {exc}"
            ) from None


def _orjson_exact(wire: bytes) -> bool:
    """Whether orjson reads every integer in `wire` exactly."""
    for start, end in digit_runs(wire, _MIN_LONG):
        signed = start - (start > 0 and wire[start - 1] == ord("-"))
        if end - start > _MAX_DIGITS or int(wire[signed:end]) not in _EXACT:
            return False
    return True


def _wire_floats(value: Any) -> Any:
    """Python data with non-finite floats replaced by torch's strings (orjson writes null)."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {k: _wire_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire_floats(v) for v in value]
    return value
