"""torch-level checks of a document: operators resolve, arguments fit, torch builds it."""

from __future__ import annotations

import importlib
import math
import operator
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch._export.serde import serialize as torch_serde
from torch.export import ExportedProgram

import schema
from app.bridge.exported import deserialize
from app.failure import Failure
from app.programs.opcheck import (
    LIST_ARMS,
    NESTED_LIST_ARMS,
    NUMBER_ARMS,
    OPTIONAL_TENSOR_LIST_ARMS,
    SCALAR_ARMS,
    optional_arms,
)
from app.programs.opset import TORCH_NAMESPACE_MODULES
from app.programs.torch_check import TorchCheck
from app.tensors.views import Stored
from schema import ArgumentAsGraph, ArgumentKind, Graph, Issue, Node
from schema.errors import pointer

#: torch's Type classes by the names schemas print, which key the tables shared with the
#: torch-free operator check.
_SCHEMA_NAMES = {
    "TensorType": "Tensor",
    "IntType": "int",
    "SymIntType": "SymInt",
    "FloatType": "float",
    "SymFloatType": "SymFloat",
    "BoolType": "bool",
    "SymBoolType": "SymBool",
    "StringType": "str",
    "ComplexType": "complex",
    "NumberType": "Scalar",
    "DeviceObjType": "Device",
}
#: FX graphs pass Python numbers for Tensor arguments (wrapped numbers: add.Tensor(x, 1)).
_TENSOR_ARMS = SCALAR_ARMS["Tensor"] | NUMBER_ARMS
#: Modules torch's deserializer resolves dotted targets from (`_operator.getitem`, `math.sqrt`).
_MODULES: dict[str, Any] = {"_operator": operator, "math": math, "torch": torch}


#: The innermost frame of a node's stack_trace, as torch writes it.
_FRAME = re.compile(r'File "([^"]*)", line (\d+), in (\S+)')


@dataclass(frozen=True)
class _Resolved:
    op: Any = None
    problem: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Built:
    """What the installed torch says of a document, and the program it built when it could."""

    check: TorchCheck
    #: the program torch built; None exactly when `check` has issues.
    program: ExportedProgram | None = None
    #: the failure that stopped the build, for a caller that reports it as it was raised.
    failure: Failure | None = None


def torch_version() -> str:
    """The version of the torch this process runs (`2.15.0+cu132`)."""
    return str(torch.__version__)


def torch_check(
    doc: schema.ExportedProgram, tensors: Mapping[str, Stored] | Iterable[Stored]
) -> TorchCheck:
    """Check every node's target and arguments against the installed torch, then build it."""
    return check_and_build(doc, tensors).check


def check_and_build(
    doc: schema.ExportedProgram, tensors: Mapping[str, Stored] | Iterable[Stored]
) -> Built:
    """`torch_check`, keeping the program torch built: the one torch path of validation and
    deserialization, so that a program one accepts the other rebuilds.

    A namespace this process has not registered is an issue (torch cannot build the program),
    naming what PT2SERDE_WORKER_IMPORTS needs; torch's own namespaces are loaded on demand.
    """
    issues: list[Issue] = []
    missing: dict[str, tuple[str, Node]] = {}
    nodes = list(_nodes(doc.graph_module.graph, ["graph_module", "graph"]))
    known = _load_torch_namespaces(nodes)
    for path, node in nodes:
        resolved = _resolve(node.target, known)
        if resolved.namespace is not None:
            missing.setdefault(resolved.namespace, (path, node))
        elif resolved.problem is not None:
            issues.append(Issue("op-unresolved", path, resolved.problem))
        elif isinstance(resolved.op, torch._ops.OpOverload):
            issues.extend(_argument_issues(node, resolved.op, path))
    issues.extend(
        Issue("op-namespace-unregistered", path, _unregistered(namespace, node))
        for namespace, (path, node) in missing.items()
    )
    if any(i.code != "op-bad-arguments" for i in issues):
        reason = (
            f"not built: namespace(s) {', '.join(missing)} are not registered"
            if missing
            else "not built: some operators do not resolve"
        )
        unchecked = [Issue("torch-verifier-failed", "", reason)]
        return Built(TorchCheck(issues, list(missing), unchecked))
    built = _build(doc, tensors)
    if not issues:
        return built
    # torch's verdict on top of ours; the program is not handed out (our checks refused it).
    check = built.check
    return Built(TorchCheck([*issues, *check.issues], [], check.unchecked), failure=built.failure)


def _build(doc: schema.ExportedProgram, tensors: Mapping[str, Stored] | Iterable[Stored]) -> Built:
    # ExportedProgram's constructor runs validate() (every verifier) as its last step.
    try:
        program = deserialize(doc, tensors)
    except Failure as failure:
        if failure.code == "torch-deserialize-failed":
            issue = Issue("torch-verifier-failed", "", failure.message)
            return Built(TorchCheck([issue]), failure=failure)
        issues = failure.issues or [Issue(failure.code, "", failure.message)]
        unchecked = [Issue("torch-verifier-failed", "", f"not built: {failure}")]
        return Built(TorchCheck(list(issues), [], unchecked), failure=failure)
    return Built(TorchCheck(), program)


def _load_torch_namespaces(nodes: list[tuple[str, Node]]) -> set[str]:
    """The namespaces this process knows, after importing torch's own modules for any the
    program uses that `import torch` left out."""
    known = _known_namespaces()
    wanted = {
        parts[2]
        for _, node in nodes
        if (parts := node.target.split("."))[:2] == ["torch", "ops"] and len(parts) > 2
    }
    modules = {TORCH_NAMESPACE_MODULES[n] for n in wanted - known if n in TORCH_NAMESPACE_MODULES}
    for module in sorted(modules):
        importlib.import_module(module)
    return _known_namespaces() if modules else known


def _unregistered(namespace: str, node: Node) -> str:
    """Why torch cannot build a program using `namespace`, and what the service needs."""
    op = node.target.removeprefix("torch.ops.").removeprefix("#").rsplit(".", 1)[0]
    called = ""
    frames = _FRAME.findall(node.metadata.get("stack_trace", ""))
    if frames:
        file, line, function = frames[-1]
        called = f"; the program calls it from {file}, line {line}, in {function}"
    return (
        f"operator namespace {namespace!r} is not registered in the torch worker, so torch "
        f"cannot build the program: set PT2SERDE_WORKER_IMPORTS to the Python module whose "
        f"import registers it (the module the exporting code imported to make {op} exist; "
        f"the document does not name it){called}"
    )


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
        return None if inner is None else optional_arms(inner)
    if name == "ListType":
        element = kind.getElementType()
        if (
            type(element).__name__ == "OptionalType"
            and type(element.getElementType()).__name__ == "TensorType"
        ):
            return OPTIONAL_TENSOR_LIST_ARMS
        if type(element).__name__ == "ListType":
            return NESTED_LIST_ARMS
        return LIST_ARMS.get(_SCHEMA_NAMES.get(type(element).__name__, ""))
    if name == "Type":
        return SCALAR_ARMS.get(kind.annotation_str)
    if name == "TensorType":
        return _TENSOR_ARMS
    return SCALAR_ARMS.get(_SCHEMA_NAMES.get(name, ""))
