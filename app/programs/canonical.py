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
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable
from operator import itemgetter
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from app.failure import Failure
from app.programs.bounds import digit_runs
from schema import Issue, dump
from schema.errors import pointer
from schema.io import dump_sorted, no_cycle_collection
from schema.models import (
    ArgumentAsBool,
    ArgumentAsCustomObj,
    ArgumentAsFloat,
    ArgumentAsGraph,
    ArgumentAsInt,
    ArgumentAsNestedTensors,
    ArgumentAsNone,
    ArgumentAsOptionalTensor,
    ArgumentAsOptionalTensors,
    ArgumentAsString,
    ArgumentAsSymBool,
    ArgumentAsSymBools,
    ArgumentAsSymFloat,
    ArgumentAsSymFloats,
    ArgumentAsSymInt,
    ArgumentAsSymInts,
    ArgumentAsTensor,
    ArgumentAsTensors,
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
    OptionalTensorArgumentAsTensor,
    OutputSpecBufferMutation,
    OutputSpecGradientToParameter,
    OutputSpecGradientToUserInput,
    OutputSpecLossOutput,
    OutputSpecParameterMutation,
    OutputSpecToken,
    OutputSpecUserInputMutation,
    OutputSpecUserOutput,
    SymBoolArgumentAsName,
    SymFloatArgumentAsName,
    SymIntArgumentAsName,
)

__all__ = ["CanonicalFailure", "canonical_bytes", "canonicalize"]

M = TypeVar("M", bound=BaseModel)
_Path = list[str | int]

#: Which value map a defined name lives in.
_TENSOR, _SYM_INT, _SYM_FLOAT, _SYM_BOOL, _CUSTOM_OBJ = range(5)
_VALUE_MAPS = (
    "tensor_values",
    "sym_int_values",
    "sym_float_values",
    "sym_bool_values",
    "custom_obj_values",
)

_MISSING: Any = object()

#: One leaf of an argument as torch's pytree walk sees it: a value name (None for a literal
#: leaf such as a SymInt's ``as_int``) and the value map the name belongs to.
_Leaf = tuple[str | None, int]


class CanonicalFailure(Failure):
    """A document that cannot be put in canonical form (it is not a well-formed graph)."""


# ---------------------------------------------------------------- leaves and renaming


def _sym_int(a: Any) -> _Leaf:
    return (a.as_name, _SYM_INT) if type(a) is SymIntArgumentAsName else (None, _SYM_INT)


def _sym_float(a: Any) -> _Leaf:
    return (a.as_name, _SYM_FLOAT) if type(a) is SymFloatArgumentAsName else (None, _SYM_FLOAT)


def _sym_bool(a: Any) -> _Leaf:
    return (a.as_name, _SYM_BOOL) if type(a) is SymBoolArgumentAsName else (None, _SYM_BOOL)


def _optional(a: Any) -> _Leaf:
    if type(a) is OptionalTensorArgumentAsTensor:
        return (a.as_tensor.name, _TENSOR)
    return (None, _TENSOR)


#: The leaves torch's ``_get_argument`` exposes per Argument arm; any other arm has none.
_LEAVES: dict[type[BaseModel], Callable[[Any], list[_Leaf]]] = {
    ArgumentAsTensor: lambda a: [(a.as_tensor.name, _TENSOR)],
    ArgumentAsTensors: lambda a: [(t.name, _TENSOR) for t in a.as_tensors],
    ArgumentAsSymInt: lambda a: [_sym_int(a.as_sym_int)],
    ArgumentAsSymInts: lambda a: [_sym_int(s) for s in a.as_sym_ints],
    ArgumentAsSymFloat: lambda a: [_sym_float(a.as_sym_float)],
    ArgumentAsSymFloats: lambda a: [_sym_float(s) for s in a.as_sym_floats],
    ArgumentAsSymBool: lambda a: [_sym_bool(a.as_sym_bool)],
    ArgumentAsSymBools: lambda a: [_sym_bool(s) for s in a.as_sym_bools],
    ArgumentAsOptionalTensors: lambda a: [_optional(o) for o in a.as_optional_tensors],
    ArgumentAsOptionalTensor: lambda a: [_optional(a.as_optional_tensor)],
    ArgumentAsCustomObj: lambda a: [(a.as_custom_obj.name, _CUSTOM_OBJ)],
    ArgumentAsNestedTensors: lambda a: [
        (t.name, _TENSOR) for row in a.as_nested_tensors for t in row
    ],
}

_NO_LEAVES: list[_Leaf] = []


def _leaves(arg: Any) -> list[_Leaf]:
    get = _LEAVES.get(type(arg))
    return _NO_LEAVES if get is None else get(arg)


_set = object.__setattr__


def _copy(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=...)`` for declared fields, minus its generic overhead.

    Canonicalizing allocates one model per renamed reference, so this is the hot path; it sets
    the same four slots pydantic's ``__copy__`` does (our models have no private attributes).
    """
    cls = type(model)
    new = cls.__new__(cls)
    values = model.__dict__.copy()
    values.update(update)
    _set(new, "__dict__", values)
    extra = model.__pydantic_extra__
    _set(new, "__pydantic_extra__", None if extra is None else extra.copy())
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(new, "__pydantic_private__", None)
    return new


def _with(model: M, field: str, value: Any) -> M:
    """A shallow copy of `model` with one field replaced (extras and the rest shared)."""
    return _copy(model, {field: value})


def _new_arm(cls: type[M], tag: str, value: Any) -> M:
    """``cls.model_construct(**{tag: value})`` for a union arm, minus its generic overhead."""
    new = cls.__new__(cls)
    _set(new, "__dict__", {tag: value})
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_fields_set__", {tag})
    _set(new, "__pydantic_private__", None)
    return new


def _named(model: M, field: str, table: dict[str, str]) -> M:
    old = getattr(model, field)
    new = table.get(old, old)
    return model if new == old else _with(model, field, new)


def _named_all(models: list[M], field: str, table: dict[str, str]) -> list[M]:
    new = [_named(m, field, table) for m in models]
    return models if all(n is o for n, o in zip(new, models, strict=True)) else new


_SYM_NAMES = (SymIntArgumentAsName, SymFloatArgumentAsName, SymBoolArgumentAsName)


def _sym(a: Any, table: dict[str, str]) -> Any:
    return _named(a, "as_name", table) if type(a) in _SYM_NAMES else a


def _syms(items: list[Any], table: dict[str, str]) -> list[Any]:
    new = [_sym(a, table) for a in items]
    return items if all(n is o for n, o in zip(new, items, strict=True)) else new


def _renamed_optional(a: Any, table: dict[str, str]) -> Any:
    if type(a) is OptionalTensorArgumentAsTensor:
        return _arm(a, _named(a.as_tensor, "name", table))
    return a


def _arm(arm: M, value: Any) -> M:
    """The same union arm holding `value`; the arm itself when `value` is its own payload."""
    tag: str = getattr(arm, "__tag__")  # noqa: B009 - a ClassVar of every Arm
    if value is getattr(arm, tag):
        return arm
    return _new_arm(type(arm), tag, value)


def _optionals(a: Any, table: dict[str, str]) -> Any:
    old = a.as_optional_tensors
    new = [_renamed_optional(o, table) for o in old]
    return a if all(n is o for n, o in zip(new, old, strict=True)) else _arm(a, new)


def _nested(a: Any, table: dict[str, str]) -> Any:
    old = a.as_nested_tensors
    new = [_named_all(row, "name", table) for row in old]
    return a if all(n is o for n, o in zip(new, old, strict=True)) else _arm(a, new)


#: How torch's ``replace_use`` / ``rename_def`` rewrite each Argument arm; other arms are kept.
_RENAMERS: dict[type[BaseModel], Callable[[Any, dict[str, str]], Any]] = {
    ArgumentAsTensor: lambda a, t: _arm(a, _named(a.as_tensor, "name", t)),
    ArgumentAsTensors: lambda a, t: _arm(a, _named_all(a.as_tensors, "name", t)),
    ArgumentAsSymInt: lambda a, t: _arm(a, _sym(a.as_sym_int, t)),
    ArgumentAsSymInts: lambda a, t: _arm(a, _syms(a.as_sym_ints, t)),
    ArgumentAsSymFloat: lambda a, t: _arm(a, _sym(a.as_sym_float, t)),
    ArgumentAsSymFloats: lambda a, t: _arm(a, _syms(a.as_sym_floats, t)),
    ArgumentAsSymBool: lambda a, t: _arm(a, _sym(a.as_sym_bool, t)),
    ArgumentAsSymBools: lambda a, t: _arm(a, _syms(a.as_sym_bools, t)),
    ArgumentAsOptionalTensors: _optionals,
    ArgumentAsOptionalTensor: lambda a, t: _arm(a, _renamed_optional(a.as_optional_tensor, t)),
    ArgumentAsCustomObj: lambda a, t: _arm(a, _named(a.as_custom_obj, "name", t)),
    ArgumentAsNestedTensors: _nested,
}


def _renamed(arg: Any, table: dict[str, str]) -> Any:
    rename = _RENAMERS.get(type(arg))
    return arg if rename is None else rename(arg, table)


# ---------------------------------------------------------------- one graph


def _fail(code: str, issues: list[Issue]) -> CanonicalFailure:
    first = issues[0]
    more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
    return CanonicalFailure(code, f"{first.path or '/'}: {first.message}{more}", issues)


def _sorted_nodes(
    inputs: list[Any],
    positions: list[int],
    nodes: list[Node],
    constants: frozenset[str],
    path: _Path,
) -> list[int]:
    """Node positions in torch's topological order (its heap with its tie-breaks)."""
    graph_inputs: set[str] = set()
    rank: dict[str, int] = {}
    issues: list[Issue] = []
    for i, arg in zip(positions, inputs, strict=True):
        for name, _ in _leaves(arg):
            if not name:
                continue
            graph_inputs.add(name)
            if name in rank:
                issues.append(
                    Issue(
                        "duplicate-value",
                        pointer([*path, "inputs", i]),
                        f"graph input {name!r} is defined twice",
                    )
                )
            rank[name] = len(rank)

    def_table: dict[str, int] = {}
    for idx, node in enumerate(nodes):
        for o, arg in enumerate(node.outputs):
            for name, _ in _leaves(arg):
                if not name:
                    continue
                if name in def_table or name in graph_inputs:
                    issues.append(
                        Issue(
                            "duplicate-value",
                            pointer([*path, "nodes", idx, "outputs", o]),
                            f"value {name!r} is defined twice",
                        )
                    )
                def_table[name] = idx
    if issues:
        raise _fail("duplicate-value", issues)

    users: list[list[int]] = [[] for _ in nodes]
    pending = [0] * len(nodes)
    uses: list[list[list[_Leaf]]] = []
    for idx, node in enumerate(nodes):
        node_uses = []
        for i, named in enumerate(node.inputs):
            leaves = _leaves(named.arg)
            node_uses.append(leaves)
            for name, _ in leaves:
                if not name or name in constants:
                    continue
                src = def_table.get(name)
                if src is None:
                    if name not in graph_inputs:
                        issues.append(
                            Issue(
                                "undefined-value",
                                pointer([*path, "nodes", idx, "inputs", i, "arg"]),
                                f"value {name!r} is used but never defined",
                            )
                        )
                    continue
                users[src].append(idx)
                pending[idx] += 1
        uses.append(node_uses)
    if issues:
        raise _fail("undefined-value", issues)

    def key(idx: int) -> tuple[str, list[tuple[str, list[int]]], int]:
        node = nodes[idx]
        ranks = [
            (
                named.name,
                [rank[n] if n and n not in constants else -1 for n, _ in leaves],
            )
            for named, leaves in zip(node.inputs, uses[idx], strict=True)
        ]
        return (node.target, ranks, idx)

    ready = [key(idx) for idx in range(len(nodes)) if pending[idx] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        idx = heapq.heappop(ready)[2]
        order.append(idx)
        for name, _ in (leaf for arg in nodes[idx].outputs for leaf in _leaves(arg)):
            if name:
                rank[name] = len(rank)
        for user in users[idx]:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, key(user))
    if len(order) != len(nodes):
        raise _fail(
            "graph-cycle",
            [
                Issue(
                    "graph-cycle",
                    pointer([*path, "nodes", idx]),
                    f"node {nodes[idx].target!r} is on a dependency cycle or after one",
                )
                for idx in range(len(nodes))
                if pending[idx]
            ],
        )
    return order


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
    order = _sorted_nodes(inputs, positions, nodes, constants, path)

    table: dict[str, str] = {}
    old_maps: list[dict[str, Any]] = [getattr(graph, field) for field in _VALUE_MAPS]
    maps: list[dict[str, Any]] = [{} for _ in _VALUE_MAPS]
    moved: list[set[str]] = [set() for _ in _VALUE_MAPS]

    def define(args: Iterable[tuple[Any, _Path]]) -> None:
        for arg, where in args:
            for name, kind in _leaves(arg):
                if name is None:
                    continue
                if name in table:
                    raise _fail(
                        "duplicate-value",
                        [Issue("duplicate-value", pointer(where), f"{name!r} is defined twice")],
                    )
                new = f"_{len(table)}"
                table[name] = new
                meta = old_maps[kind].get(name, _MISSING)
                if meta is _MISSING:
                    raise _fail(
                        "missing-value-meta",
                        [
                            Issue(
                                "missing-value-meta",
                                pointer(where),
                                f"{name!r} has no entry in {_VALUE_MAPS[kind]}",
                            )
                        ],
                    )
                maps[kind][new] = meta
                moved[kind].add(name)

    define((arg, [*path, "inputs", i]) for i, arg in zip(positions, inputs, strict=True))
    define(
        (arg, [*path, "nodes", idx, "outputs", o])
        for idx in order
        for o, arg in enumerate(nodes[idx].outputs)
    )
    # Entries nothing defines keep their names, as in torch, except where a new name took the
    # name: a stale entry must not shadow a renamed value (torch's in-place rename mixes them).
    for old, new_map, gone in zip(old_maps, maps, moved, strict=True):
        for name, meta in old.items():
            if name not in gone and name not in new_map:
                new_map[name] = meta

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
                new_sub = _copy(sub, {"name": f"_g{subgraphs}", "graph": sub_graph})
                subgraphs += 1
                new_arg: Any = _new_arm(ArgumentAsGraph, "as_graph", new_sub)
            else:
                new_arg = _renamed(arg, table)
            new_inputs.append(named if new_arg is arg else _with(named, "arg", new_arg))
        new_nodes.append(
            _copy(
                node,
                {
                    "inputs": new_inputs,
                    "outputs": [_renamed(o, table) for o in node.outputs],
                    "metadata": {},
                },
            )
        )

    update: dict[str, Any] = {
        field: dict(sorted(values.items(), key=itemgetter(0)))
        for field, values in zip(_VALUE_MAPS, maps, strict=True)
    }
    update["inputs"] = [_renamed(a, table) for a in inputs]
    update["outputs"] = [_renamed(a, table) for a in outputs]
    update["nodes"] = new_nodes
    return _copy(graph, update), table


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
        return _with(model, field, self.name(getattr(model, field), [*where, field]))

    def user_arg(self, arg: Any, keep: tuple[type[BaseModel], ...], where: _Path) -> Any:
        if isinstance(arg, keep):
            return arg
        for name, _ in _leaves(arg):
            if name is not None:
                self.name(name, where)
        return _renamed(arg, self.table)

    def spec(self, spec: Any, where: _Path) -> Any:
        """The spec with its values renamed (its arm kind decides which fields refer to values)."""
        tag: str = spec.__tag__
        body = spec.value
        at = [*where, tag]
        if tag == "constant_input":
            return spec
        if tag in ("user_input", "user_output"):
            keep = _KEEP_USER_INPUT if tag == "user_input" else _KEEP_USER_OUTPUT
            new_body = _with(body, "arg", self.user_arg(body.arg, keep, [*at, "arg"]))
        else:
            new_body = _with(body, "arg", self.ref(body.arg, "name", [*at, "arg"]))
            if tag in ("gradient_to_user_input", "user_input_mutation"):
                new_body = self.ref(new_body, "user_input_name", at)
        return _new_arm(type(spec), tag, new_body)


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
