"""Operator calls checked against torch's schemas, without torch (`app.releases`).

A document is checked against the rules of the release that wrote it (`app.releases.judging`).

For every node whose target is an overload of a namespace torch registers by itself: the
overload exists, every argument the node names is one the schema has (once), positional ones
fill the schema's leading places, every argument without a default is given, and each
argument's wire arm fits the declared type. Custom
namespaces, higher-order operators and Python targets have no schema here and are left alone.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import schema
from app.programs import opset
from app.programs.findings import FindingList
from app.programs.graph import GraphSite
from app.releases import Rules, installed, releases_with
from app.releases import rules as _rules

#: The arms of a Python number, which also stand for a Tensor argument of the operators torch
#: wraps numbers for (`add.Tensor(x, 1)`; `OpSchema.numbers_as_tensors`).
NUMBER_ARMS = frozenset(
    {"as_int", "as_float", "as_bool", "as_sym_int", "as_sym_float", "as_sym_bool", "as_complex"}
)
#: The wire arms an argument of each schema type may be written as (keys: torch's type names as
#: schemas print them). Shared with the torch-level check in `app.bridge.checks`.
SCALAR_ARMS: dict[str, frozenset[str]] = {
    "Tensor": frozenset({"as_tensor"}),
    "int": frozenset({"as_int", "as_sym_int"}),
    "SymInt": frozenset({"as_int", "as_sym_int"}),
    "float": frozenset({"as_float", "as_sym_float", "as_int", "as_sym_int"}),
    "SymFloat": frozenset({"as_float", "as_sym_float", "as_int", "as_sym_int"}),
    "bool": frozenset({"as_bool", "as_sym_bool"}),
    "SymBool": frozenset({"as_bool", "as_sym_bool"}),
    "str": frozenset({"as_string"}),
    "complex": frozenset({"as_complex"}),
    "Scalar": NUMBER_ARMS,
    "Device": frozenset({"as_device", "as_string"}),
    "ScalarType": frozenset({"as_scalar_type"}),
    "Layout": frozenset({"as_layout"}),
    "MemoryFormat": frozenset({"as_memory_format"}),
}
#: The wire arms of a list of each element type.
LIST_ARMS: dict[str, frozenset[str]] = {
    "Tensor": frozenset({"as_tensors"}),
    "int": frozenset({"as_ints", "as_sym_ints"}),
    "SymInt": frozenset({"as_ints", "as_sym_ints"}),
    "float": frozenset({"as_floats", "as_sym_floats"}),
    "SymFloat": frozenset({"as_floats", "as_sym_floats"}),
    "bool": frozenset({"as_bools", "as_sym_bools"}),
    "SymBool": frozenset({"as_bools", "as_sym_bools"}),
    "str": frozenset({"as_strings"}),
}
OPTIONAL_TENSOR_LIST_ARMS = frozenset({"as_optional_tensors", "as_tensors"})
NESTED_LIST_ARMS = frozenset({"as_int_lists", "as_float_lists", "as_nested_tensors"})


def optional_arms(inner: frozenset[str]) -> frozenset[str]:
    """The arms of `T?` given those of `T`."""
    extra = {"as_none", "as_optional_tensor"} if "as_tensor" in inner else {"as_none"}
    return inner | extra


@functools.cache
def accepted_arms(kind: str, *, numbers_as_tensors: bool = False) -> frozenset[str] | None:
    """The wire arms that fit a schema type (`Tensor?`, `SymInt[2]`), or None when unchecked."""
    if kind.endswith("?"):
        inner = accepted_arms(kind[:-1], numbers_as_tensors=numbers_as_tensors)
        return None if inner is None else optional_arms(inner)
    if kind == "Tensor" and numbers_as_tensors:
        return SCALAR_ARMS[kind] | NUMBER_ARMS
    if not kind.endswith("]"):
        return SCALAR_ARMS.get(kind)
    open_at = kind.rindex("[")
    element, size = kind[:open_at], kind[open_at + 1 : -1]
    if element == "Tensor?":
        return OPTIONAL_TENSOR_LIST_ARMS
    if element.endswith("]"):
        return NESTED_LIST_ARMS
    accepted = LIST_ARMS.get(element)
    if accepted is not None and size:
        # `int[2] stride` also takes a single int, which the operator broadcasts
        accepted = accepted | SCALAR_ARMS.get(element, frozenset())
    return accepted


def check_operators(
    graphs: Sequence[GraphSite], found: FindingList, rules: Rules | None = None
) -> None:
    """Check every call of a builtin-namespace overload in `graphs` against its schema in
    `rules` (the release that wrote the document; the installed one by default)."""
    release = (rules or installed()).release
    for graph, path, _, _ in graphs:
        for i, node in enumerate(graph.nodes):
            called = _builtin_overload(node.target, release)
            if called is not None:
                _call(node, *called, release, path, i, found)


@functools.lru_cache(maxsize=4096)
def _builtin_overload(target: str, release: str) -> tuple[str, str, str] | None:
    """(namespace, name, overload) of a target naming an overload of a builtin namespace."""
    parts = target.split(".")
    if len(parts) != 5 or parts[:2] != ["torch", "ops"]:
        return None
    namespace, name, overload = parts[2:]
    builtin = _rules(release).is_builtin_namespace(namespace)
    return (namespace, name, overload) if builtin else None


_POSITIONAL = schema.ArgumentKind.POSITIONAL


class _Place(NamedTuple):
    """An argument of a schema as a call is checked against it."""

    position: int
    argument: opset.OpArgument
    #: the wire arms that fit its type, or None when unchecked
    accepted: frozenset[str] | None


@dataclass(frozen=True)
class _Signature:
    """What the calls of one overload are checked against, worked out once per overload."""

    op: opset.OpSchema
    places: dict[str, _Place]
    #: the arguments without a default
    required: tuple[opset.OpArgument, ...]


@functools.lru_cache(maxsize=4096)
def _signature(namespace: str, name: str, overload: str, release: str) -> _Signature | None:
    op = _rules(release).lookup(namespace, name, overload)
    if op is None or op.unreachable:
        return None
    places = {
        a.name: _Place(k, a, accepted_arms(a.type, numbers_as_tensors=op.numbers_as_tensors))
        for k, a in enumerate(op.arguments)
    }
    return _Signature(op, places, tuple(a for a in op.arguments if a.default is None))


def _call(
    node: schema.Node,
    namespace: str,
    name: str,
    overload: str,
    release: str,
    path: str,
    i: int,
    found: FindingList,
) -> None:
    signature = _signature(namespace, name, overload, release)
    if signature is None:
        message = _unknown(namespace, name, overload, _rules(release))
        found.add("operator-unknown", "error", f"{path}/nodes/{i}/target", message)
        return
    if signature.op.vararg:
        return
    at = f"{path}/nodes/{i}"
    given, positional = _inputs(node, signature.places, at, found)
    if sorted(positional) != list(range(len(positional))):
        # torch passes positional arguments in the order given: a gap shifts the ones after it
        found.add(
            "argument-position",
            "error",
            f"{at}/inputs",
            f"the positional arguments of {node.target} leave a gap in its schema's order",
        )
    for argument in signature.required:
        if argument.name not in given:
            found.add(
                "argument-missing",
                "error",
                f"{at}/inputs",
                f"{node.target} needs argument {argument.name!r} ({argument.type})",
            )


def _inputs(
    node: schema.Node, places: dict[str, _Place], at: str, found: FindingList
) -> tuple[set[str], list[int]]:
    """Each input of the node at `at` against its place in the schema (known, given once,
    keyword-only, the wire arm); the names given, and the places of those given by position."""
    given: set[str] = set()
    positional: list[int] = []
    for j, named in enumerate(node.inputs):
        place = places.get(named.name)
        if place is None or named.name in given:
            _misnamed(node, named, j, places, at, found)
            continue
        given.add(named.name)
        if named.kind == _POSITIONAL:
            positional.append(place.position)
            if place.argument.kwarg_only:
                found.add(
                    "argument-position",
                    "error",
                    f"{at}/inputs/{j}/kind",
                    f"{named.name!r} of {node.target} is keyword-only, given by position",
                )
        if place.accepted is not None and named.arg.kind not in place.accepted:
            found.add(
                "argument-kind",
                "error",
                f"{at}/inputs/{j}/arg",
                f"{named.name!r} of {node.target} is {place.argument.type}, "
                f"given as {named.arg.kind}",
            )
    return given, positional


def _misnamed(
    node: schema.Node,
    named: schema.NamedArgument,
    j: int,
    places: dict[str, _Place],
    at: str,
    found: FindingList,
) -> None:
    where = f"{at}/inputs/{j}/name"
    if named.name in places:
        found.add("argument-repeated", "error", where, f"{named.name!r} given twice")
        return
    found.add(
        "argument-unknown",
        "error",
        where,
        f"{node.target} has no argument {named.name!r} (it has {', '.join(places) or 'none'})",
    )


def _unknown(namespace: str, name: str, overload: str, rules: Rules) -> str:
    target = f"torch.ops.{namespace}.{name}.{overload}"
    known = [o for o in rules.overloads(namespace, name) if rules.has_overload(namespace, name, o)]
    elsewhere = releases_with(namespace, name, overload)
    where = (
        f"; torch {', '.join(elsewhere)} {'has' if len(elsewhere) == 1 else 'have'} it"
        if elsewhere
        else ""
    )
    if known:
        return (
            f"{target}: torch {rules.torch} has no such overload of "
            f"{namespace}::{name} (it has {', '.join(known)}){where}"
        )
    return f"{target}: torch {rules.torch} has no operator {namespace}::{name}{where}"
