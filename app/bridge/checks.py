"""torch-level checks of a document: operators resolve, arguments fit, torch builds it.

Imports torch at module level: `app.bridge` reaches this module only on first use.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch._export.serde import serialize as torch_serde

import schema
from app.archive.raw import RawTensor
from app.bridge.errors import BridgeFailure
from app.bridge.exported import deserialize
from app.bridge.report import TorchCheck
from app.programs.screen import UnsafeProgram
from schema import ArgumentAsGraph, ArgumentKind, Graph, Issue, Node
from schema.errors import pointer

#: Failures of our own pre-checks that are findings about the document and its tensors.
_INPUT_FAILURES = frozenset({"weights-mismatch", "tensor-data-invalid"})

_NUMBERS = frozenset(
    {"as_int", "as_float", "as_bool", "as_sym_int", "as_sym_float", "as_sym_bool", "as_complex"}
)
_SCALAR_ARMS: dict[str, frozenset[str]] = {
    # FX graphs pass Python numbers for Tensor arguments (wrapped numbers: add.Tensor(x, 1)).
    "TensorType": frozenset({"as_tensor"}) | _NUMBERS,
    "IntType": frozenset({"as_int", "as_sym_int"}),
    "SymIntType": frozenset({"as_int", "as_sym_int"}),
    "FloatType": frozenset({"as_float", "as_sym_float", "as_int", "as_sym_int"}),
    "SymFloatType": frozenset({"as_float", "as_sym_float", "as_int", "as_sym_int"}),
    "BoolType": frozenset({"as_bool", "as_sym_bool"}),
    "SymBoolType": frozenset({"as_bool", "as_sym_bool"}),
    "StringType": frozenset({"as_string"}),
    "ComplexType": frozenset({"as_complex"}),
    "NumberType": _NUMBERS,
    "DeviceObjType": frozenset({"as_device", "as_string"}),
    "ScalarType": frozenset({"as_scalar_type"}),
    "Layout": frozenset({"as_layout"}),
    "MemoryFormat": frozenset({"as_memory_format"}),
}
_LIST_ARMS: dict[str, frozenset[str]] = {
    "TensorType": frozenset({"as_tensors"}),
    "IntType": frozenset({"as_ints", "as_sym_ints"}),
    "SymIntType": frozenset({"as_ints", "as_sym_ints"}),
    "FloatType": frozenset({"as_floats", "as_sym_floats"}),
    "SymFloatType": frozenset({"as_floats", "as_sym_floats"}),
    "BoolType": frozenset({"as_bools", "as_sym_bools"}),
    "SymBoolType": frozenset({"as_bools", "as_sym_bools"}),
    "StringType": frozenset({"as_strings"}),
}
#: Modules torch's deserializer resolves dotted targets from (`_operator.getitem`, `math.sqrt`).
_MODULES: dict[str, Any] = {"_operator": operator, "math": math, "torch": torch}


@dataclass(frozen=True)
class _Resolved:
    op: Any = None
    problem: str | None = None
    namespace: str | None = None


def torch_check(
    doc: schema.ExportedProgram, tensors: Mapping[str, RawTensor] | Iterable[RawTensor]
) -> TorchCheck:
    """Check every node's target and arguments against the installed torch, then build the program.

    A target in a namespace this process has not registered is not an error: the namespace goes
    to `namespaces_to_register` and the checks that needed it are listed in `unchecked`.
    """
    issues: list[Issue] = []
    unchecked: list[Issue] = []
    missing: dict[str, None] = {}
    known = _known_namespaces()
    for path, node in _nodes(doc.graph_module.graph, ["graph_module", "graph"]):
        resolved = _resolve(node.target, known)
        if resolved.namespace is not None:
            missing[resolved.namespace] = None
            reason = f"namespace {resolved.namespace!r} is not registered in this process"
            unchecked.append(Issue("op-unresolved", path, reason))
            unchecked.append(Issue("op-bad-arguments", path, reason))
        elif resolved.problem is not None:
            issues.append(Issue("op-unresolved", path, resolved.problem))
        elif isinstance(resolved.op, torch._ops.OpOverload):
            issues.extend(_argument_issues(node, resolved.op, path))
    if missing:
        unchecked.append(
            Issue(
                "torch-verifier-failed",
                "",
                f"not built: namespace(s) {', '.join(missing)} are not registered",
            )
        )
    elif any(i.code == "op-unresolved" for i in issues):
        unchecked.append(
            Issue("torch-verifier-failed", "", "not built: some operators do not resolve")
        )
    else:
        _build(doc, tensors, issues, unchecked)
    return TorchCheck(issues, list(missing), unchecked)


def _build(
    doc: schema.ExportedProgram,
    tensors: Mapping[str, RawTensor] | Iterable[RawTensor],
    issues: list[Issue],
    unchecked: list[Issue],
) -> None:
    # ExportedProgram's constructor runs validate() (every verifier) as its last step.
    try:
        deserialize(doc, tensors)
    except UnsafeProgram as refused:
        issues.extend(refused.issues)
        unchecked.append(Issue("torch-verifier-failed", "", f"not built: {refused}"))
    except BridgeFailure as failure:
        if failure.code == "torch-deserialize-failed":
            issues.append(Issue("torch-verifier-failed", "", failure.message))
            return
        if failure.code in _INPUT_FAILURES:
            issues.extend(failure.issues)
        unchecked.append(Issue("torch-verifier-failed", "", f"not built: {failure}"))


def _known_namespaces() -> set[str]:
    names: list[str] = torch._C._dispatch_get_all_op_names()
    return {name.split("::", 1)[0] for name in names}


def _resolve(target: str, known: set[str]) -> _Resolved:
    if target.startswith("torch.ops."):
        parts = target.split(".")
        namespace = parts[2]
        if namespace == "higher_order":
            if len(parts) != 4:
                return _Resolved(problem=f"{target!r} is not torch.ops.higher_order.<name>")
        elif len(parts) != 5:
            return _Resolved(problem=f"{target!r} is not torch.ops.<namespace>.<op>.<overload>")
        elif namespace not in known:
            return _Resolved(namespace=namespace)
        return _walk(torch.ops, parts[2:], target)
    if target.startswith("#"):
        namespace = target[1:].split(":", 1)[0]
        if namespace not in torch_serde._deserialization_registry:
            return _Resolved(namespace=namespace)
        return _Resolved(op=target)
    head, _, rest = target.partition(".")
    module = _MODULES.get(head)
    if module is None or not rest:
        return _Resolved(problem=f"{target!r} is not an operator torch can resolve")
    return _walk(module, rest.split("."), target)


def _walk(root: Any, names: list[str], target: str) -> _Resolved:
    found = root
    for name in names:
        try:
            found = getattr(found, name)
        except (AttributeError, RuntimeError):
            return _Resolved(problem=f"{target!r} does not exist in torch {torch.__version__}")
    if not callable(found):
        return _Resolved(problem=f"{target!r} is not callable")
    return _Resolved(op=found)


def _nodes(graph: Graph, path: list[str | int]) -> Iterator[tuple[str, Node]]:
    for i, node in enumerate(graph.nodes):
        node_path = [*path, "nodes", i]
        yield pointer(node_path), node
        for j, named in enumerate(node.inputs):
            if isinstance(named.arg, ArgumentAsGraph):
                yield from _nodes(
                    named.arg.as_graph.graph, [*node_path, "inputs", j, "arg", "as_graph", "graph"]
                )


def _argument_issues(node: Node, op: torch._ops.OpOverload, path: str) -> list[Issue]:
    arguments = op._schema.arguments
    by_name = {a.name: (k, a) for k, a in enumerate(arguments)}
    issues: list[Issue] = []
    seen: set[str] = set()
    positional: list[int] = []
    for j, named in enumerate(node.inputs):
        where = f"{path}/inputs/{j}"
        found = by_name.get(named.name)
        if found is None:
            issues.append(Issue("op-bad-arguments", where, f"{op} has no argument {named.name!r}"))
            continue
        if named.name in seen:
            issues.append(Issue("op-bad-arguments", where, f"{named.name!r} is given twice"))
            continue
        seen.add(named.name)
        index, argument = found
        if named.kind == ArgumentKind.POSITIONAL:
            if argument.kwarg_only:
                issues.append(
                    Issue(
                        "op-bad-arguments",
                        where,
                        f"{named.name!r} is keyword-only but passed by position",
                    )
                )
            positional.append(index)
        accepted = _accepted_arms(argument)
        if accepted is not None and named.arg.kind not in accepted:
            issues.append(
                Issue(
                    "op-bad-arguments",
                    where,
                    f"{named.name!r} is {argument.real_type.annotation_str}, got {named.arg.kind}",
                )
            )
    if sorted(positional) != list(range(len(positional))):
        issues.append(
            Issue(
                "op-bad-arguments",
                f"{path}/inputs",
                "positional arguments leave a gap in the schema's order",
            )
        )
    for argument in arguments:
        if argument.name not in seen and not argument.has_default_value():
            issues.append(
                Issue(
                    "op-bad-arguments",
                    f"{path}/inputs",
                    f"required argument {argument.name!r} is missing",
                )
            )
    return issues


def _accepted_arms(argument: Any) -> frozenset[str] | None:
    kind = argument.real_type
    accepted = _type_arms(kind)
    if accepted is not None and argument.N is not None:
        # `int[2] stride` also takes a single int, which the op broadcasts.
        inner = kind.getElementType() if type(kind).__name__ == "OptionalType" else kind
        if type(inner).__name__ == "ListType":
            accepted = accepted | (_type_arms(inner.getElementType()) or frozenset())
    return accepted


def _type_arms(kind: Any) -> frozenset[str] | None:
    name = type(kind).__name__
    if name == "OptionalType":
        inner = _type_arms(kind.getElementType())
        if inner is None:
            return None
        extra = {"as_none", "as_optional_tensor"} if "as_tensor" in inner else {"as_none"}
        return inner | extra
    if name == "ListType":
        element = kind.getElementType()
        if (
            type(element).__name__ == "OptionalType"
            and type(element.getElementType()).__name__ == "TensorType"
        ):
            return frozenset({"as_optional_tensors", "as_tensors"})
        if type(element).__name__ == "ListType":
            return frozenset({"as_int_lists", "as_float_lists", "as_nested_tensors"})
        return _LIST_ARMS.get(type(element).__name__)
    if name == "Type":
        return _SCALAR_ARMS.get(kind.annotation_str)
    return _SCALAR_ARMS.get(name)
