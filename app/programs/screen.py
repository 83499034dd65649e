"""The safety screen: what in a document would make torch run code or touch files on load.

torch 2.13's loader `sympify`s (evaluates) every SymExpr string, `exec`s `guards_code`,
imports modules named by `__enum__` treespec contexts and defaultdict factories, resolves node
targets by attribute lookup on `torch`, `operator` and `math`, and unpickles use_pickle
payloads and custom objects. Everything outside what torch itself writes is refused here.
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

import schema
from app.failure import Failure, problem_code
from app.programs import opset
from app.programs.expr import UnsafeExpression, check_expression, check_guard
from app.programs.findings import Finding, FindingList, Severity
from app.programs.graph import GraphSite, nested, sym_exprs, walk_graphs
from app.releases import INSTALLED, installed, judging
from app.releases import rules as release_rules
from app.settings import Limits
from schema.errors import pointer

#: Operators that read or write files: those with a `str filename` argument in torch's schemas,
#: and debugprims' loader of tensors from its debug directory (a test holds this to the registry).
UNSAFE_OPERATORS = frozenset(
    {("aten", "from_file"), ("aten", "save"), ("debugprims", "load_tensor")}
)
#: Inductor's internal storage primitives: they build or resize a tensor over raw storage
#: without the bounds check every other view takes (`as_strided`'s), so a program calling them
#: reads and writes memory outside its tensors (tests/test_unsafe_operators.py holds each to
#: torch's behaviour).
UNCHECKED_MEMORY_OPERATORS = frozenset(
    {
        ("inductor", "_reinterpret_tensor"),
        ("inductor", "_alloc_from_pool"),
        ("inductor", "resize_storage_bytes_"),
    }
)
#: Container types torch registers for pytrees; any other type must be registered by the loader.
BUILTIN_CONTAINERS = frozenset(
    {
        "builtins.tuple",
        "builtins.list",
        "builtins.dict",
        "collections.namedtuple",
        "collections.OrderedDict",
        "collections.defaultdict",
        "collections.deque",
        "torch.fx.immutable_collections.immutable_list",
        "torch.fx.immutable_collections.immutable_dict",
        "torch.Size",
    }
)
#: Higher-order operators whose arguments are code: inline_asm_elementwise compiles its
#: `asm_str` (and, unescaped, its `constraints`) into a CUDA kernel and runs it, native code
#: carried in the document (tests/test_unsafe_operators.py shows torch's kernel source).
CODE_CARRYING_HIGHER_ORDER = frozenset({"inline_asm_elementwise"})
#: Python functions torch writes as targets that import a module named by their arguments
#: when the program runs (a custom autograd Function's, by "module.Class"): a document would
#: choose what the runner imports.
IMPORTING_PYTHON_TARGETS = frozenset(
    {"torch.export.custom_ops._call_custom_autograd_function_in_pre_dispatch"}
)
#: The serialized type name torch's pytree gives every type registered without one: they all
#: share it, so it names whichever registered last, and torch refuses to write it.
PYTREE_PLACEHOLDER = "NO_SERIALIZED_TYPE_NAME_FOUND"
#: defaultdict factories that resolve inside builtins (torch imports the named module).
SAFE_DEFAULT_FACTORIES = frozenset({"list", "dict", "set", "tuple", "int", "float", "str", "bool"})

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"(?!__)[A-Za-z_][A-Za-z0-9_]*(?:\.(?!__)[A-Za-z_][A-Za-z0-9_]*)*")
_EXTENSION = re.compile(r"#(?!__)[A-Za-z_][A-Za-z0-9_]*:[A-Za-z0-9_.]+")
_SAMPLE_INPUTS = re.compile(
    r"(?:^|/)(?:data/sample_inputs/[^/]+\.pt|extra/[^/]+\.sample_input\.pt)"
)


class UnsafeProgram(Failure):
    """A program torch would run foreign code or touch files for while loading it."""


def screen(
    doc: schema.ExportedProgram,
    limits: Limits,
    pickled: Sequence[str] = (),
    *,
    graphs: Sequence[GraphSite] | None = None,
) -> list[Finding]:
    """Every construct torch would evaluate, import, exec or unpickle that is not its own.

    `graphs` is `list(walk_graphs(doc.graph_module.graph))` when the caller already has it.
    """
    found = FindingList()
    custom: set[str] = set()
    # what the release that wrote the program registers (a worker lacking an operator refuses it
    # before torch resolves anything: app.operations)
    release = judging(doc.torch_version)[0].release
    for graph, path, _, _ in _graphs(doc, graphs):
        for text, at in sym_exprs(graph, path):
            _expression(text, at, found)
        for i, node in enumerate(graph.nodes):
            if _verdict(node.target, release) is not None:
                _target(node.target, release, f"{path}/nodes/{i}/target", found, custom)
            if node.target == PRINT_TARGET:
                _print_format(node, f"{path}/nodes/{i}", found)
            _unchecked_call(node, release, f"{path}/nodes/{i}", found)
            for j, named in enumerate(node.inputs):
                if type(named.arg) in _OPERATOR_CARRIERS:
                    for op, at in _operators(named.arg, f"{path}/nodes/{i}/inputs/{j}/arg"):
                        _target(op, release, at, found, custom)
    for key in doc.range_constraints:
        _expression(key, pointer(["range_constraints", key]), found)
    for i, line in enumerate(doc.guards_code):
        try:
            check_guard(line)
        except UnsafeExpression as exc:
            found.add("unsafe-guards-code", "error", f"/guards_code/{i}", exc.message)
    for i, entry in enumerate(doc.graph_module.module_call_graph):
        if entry.signature is not None:
            where = f"/graph_module/module_call_graph/{i}/signature"
            _treespec(entry.signature.in_spec, f"{where}/in_spec", found)
            _treespec(entry.signature.out_spec, f"{where}/out_spec", found)
    _custom_objects(doc, "warning" if limits.allow_opaque_pickles else "error", found)
    found.extend(pickle_findings(pickled, limits))
    return found.result()


def refuse_if_unsafe(findings: Sequence[Finding]) -> None:
    """Raise UnsafeProgram (the first error's code, every finding as an issue) on any error."""
    errors = [f for f in findings if f.severity == "error"]
    if not errors:
        return
    first = errors[0]
    raise UnsafeProgram(
        problem_code(first.code),
        f"{len(errors)} unsafe construct(s); first at {first.path or '/'}: {first.message}",
        [schema.Issue(f.code, f.path, f.message) for f in findings],
    )


def custom_namespaces(
    doc: schema.ExportedProgram, *, graphs: Sequence[GraphSite] | None = None
) -> list[str]:
    """Operator namespaces the program calls that torch does not register by itself."""
    found: set[str] = set()
    release = judging(doc.torch_version)[0].release
    for graph, path, _, _ in _graphs(doc, graphs):
        for node in graph.nodes:
            targets = [node.target]
            for named in node.inputs:
                if type(named.arg) in _OPERATOR_CARRIERS:
                    targets.extend(op for op, _ in _operators(named.arg, path))
            for target in targets:
                namespace = _custom_namespace(target, release)
                if namespace is not None:
                    found.add(namespace)
    return sorted(found)


def _graphs(
    doc: schema.ExportedProgram, graphs: Sequence[GraphSite] | None
) -> Sequence[GraphSite] | Iterator[GraphSite]:
    return walk_graphs(doc.graph_module.graph) if graphs is None else graphs


# ---------------------------------------------------------------- expressions and targets


def _expression(text: str, at: str, found: FindingList) -> None:
    try:
        check_expression(text)
    except UnsafeExpression as exc:
        found.add("unsafe-expression", "error", at, exc.message)


#: The argument arms that are or may hold an operator.
_OPERATOR_CARRIERS = frozenset({schema.ArgumentAsOperator, schema.ArgumentAsStringToArgument})


def _operators(arg: Any, path: str) -> Iterator[tuple[str, str]]:
    """Operators passed as arguments (e.g. to auto_functionalized): torch resolves them too."""
    for sub, where in nested(arg, path):
        if isinstance(sub, schema.ArgumentAsOperator):
            yield sub.as_operator, f"{where}/as_operator"


#: The verdicts that refuse a target (the namespace note is advisory).
_REFUSING_CODES = ("unsafe-target", "unsafe-operator")


@functools.lru_cache(maxsize=4096)
def _verdict(target: str, release: str) -> tuple[str, str] | None:
    """What resolving `target` earns: ("unsafe-target" or "unsafe-operator", why), or
    ("operator-namespace-to-register", the namespace), or None (most targets)."""
    problem = target_problem(target, release)
    if problem is not None:
        return "unsafe-target", problem
    parts = target.split(".")
    if len(parts) == 5 and (parts[2], parts[3]) in UNSAFE_OPERATORS:
        return "unsafe-operator", f"{target} reads or writes files"
    if len(parts) == 5 and (parts[2], parts[3]) in UNCHECKED_MEMORY_OPERATORS:
        return "unsafe-operator", f"{target} reaches memory outside its tensors' storage"
    if len(parts) == 4 and parts[2] == "higher_order" and parts[3] in CODE_CARRYING_HIGHER_ORDER:
        return "unsafe-operator", f"{target} compiles and runs code its arguments carry"
    namespace = _custom_namespace(target, release)
    return None if namespace is None else ("operator-namespace-to-register", namespace)


def _target(target: str, release: str, at: str, found: FindingList, custom: set[str]) -> None:
    verdict = _verdict(target, release)
    if verdict is None:
        return
    code, detail = verdict
    if code in _REFUSING_CODES:
        found.add(code, "error", at, detail)
        return
    namespace = detail
    if namespace not in custom:
        custom.add(namespace)
        found.add(
            "operator-namespace-to-register",
            "info",
            at,
            f"register first: torch does not register the operator namespace {namespace!r} by "
            "itself; PT2SERDE_WORKER_IMPORTS must name the module that registers it before "
            "torch can load this program",
        )


@functools.lru_cache(maxsize=4096)
def target_problem(target: str, release: str = INSTALLED) -> str | None:
    """Why torch resolving `target` could reach something other than an operator or a Python
    function it writes itself, or None.

    An unknown operator of a namespace torch registers is not a safety problem (torch's lookup
    fails); semantic validation reports it. What `release` (the one that wrote the program) or
    the pinned torch registers is torch's own; a worker whose torch lacks it refuses the program
    before resolving anything (`app.operations.refuse_operators_not_in`).
    """
    if target in IMPORTING_PYTHON_TARGETS:
        return f"{target!r} imports the module its arguments name when the program runs"
    known = (release_rules(release), installed())
    if any(target in r.python_targets() for r in known) or _EXTENSION.fullmatch(target):
        return None
    parts = target.split(".")
    if parts[:2] != ["torch", "ops"] or not all(_IDENTIFIER.fullmatch(p) for p in parts[2:]):
        return (
            f"{target!r} is neither an operator overload, a higher-order operator, "
            "nor a Python function torch writes"
        )
    if len(parts) == 4 and parts[2] == "higher_order":
        if any(r.is_higher_order(parts[3]) for r in known):
            return None
        return f"{target!r} is not a higher-order operator torch registers"
    if len(parts) != 5:
        return f"{target!r} is not torch.ops.<namespace>.<operator>.<overload>"
    namespace, name, overload = parts[2:]
    if any(r.has_overload(namespace, name, overload) for r in known):
        return None
    if any(
        namespace in r.attribute_names("ops")
        or name in r.attribute_names("namespace")
        or overload in r.attribute_names("packet")
        for r in known
    ):
        return f"{target!r} names an attribute of torch's operator objects, not an operator"
    builtin = any(r.is_builtin_namespace(namespace) for r in known)
    if not builtin and any(_dunder(p) for p in parts[2:]):
        return f"{target!r}: a custom operator name cannot be a special (dunder) name"
    return None


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


@functools.lru_cache(maxsize=4096)
def _custom_namespace(target: str, release: str) -> str | None:
    """The namespace of an operator overload target outside torch's own, if it is a safe one.

    Namespaces torch defines in modules of its own are not custom: workers import those.
    """
    parts = target.split(".")
    if len(parts) != 5 or parts[:2] != ["torch", "ops"]:
        return None
    namespace = parts[2]
    builtin = release_rules(release).is_builtin_namespace(namespace)
    if builtin or namespace in opset.TORCH_NAMESPACE_MODULES:
        return None
    return namespace if target_problem(target, release) is None else None


#: The argument by which an operator's schema offers to skip its own checks (`bool unsafe`:
#: segment_reduce then reads past its input, as far as its lengths say).
UNSAFE_FLAG = "unsafe"


def _unchecked_call(node: schema.Node, release: str, at: str, found: FindingList) -> None:
    """Refuse a call that sets its operator's `unsafe` flag to anything but false."""
    for j, named in enumerate(node.inputs):
        if named.name != UNSAFE_FLAG or not _declares_unsafe_flag(node.target, release):
            continue
        if not (isinstance(named.arg, schema.ArgumentAsBool) and not named.arg.as_bool):
            found.add(
                "unsafe-operator",
                "error",
                f"{at}/inputs/{j}/arg",
                f"{node.target} with {UNSAFE_FLAG}=true skips torch's checks of its inputs",
            )


@functools.lru_cache(maxsize=1024)
def _declares_unsafe_flag(target: str, release: str) -> bool:
    parts = target.split(".")
    op = (
        release_rules(release).lookup(*parts[2:])
        if len(parts) == 5 and parts[:2] == ["torch", "ops"]
        else None
    )
    return op is not None and any(a.name == UNSAFE_FLAG and a.type == "bool" for a in op.arguments)


#: torch's print operator: `print(format_str.format(*args, **kwargs))` when the program runs.
PRINT_TARGET = "torch.ops.higher_order.print"


def _print_format(node: schema.Node, at: str, found: FindingList) -> None:
    """A print's format string may only place its arguments: a replacement field that reads
    an attribute or item (`{0.__class__}`, `{0[k]}`) walks from a tensor to any object in the
    process (`{0.__reduce_ex__.__func__.__globals__[torch].os.environ}` prints its secrets)."""
    # torch's reading of a higher-order call: positional inputs (or unnamed ones) are args
    positional = [
        (j, n)
        for j, n in enumerate(node.inputs)
        if n.kind == schema.ArgumentKind.POSITIONAL or not n.name
    ]
    named = [(j, n) for j, n in enumerate(node.inputs) if n.name == "format_str"]
    for j, named_arg in positional[:1] or named[:1]:
        where = f"{at}/inputs/{j}/arg"
        if not isinstance(named_arg.arg, schema.ArgumentAsString):
            found.add("unsafe-format-string", "error", where, "print's format is not a string")
            return
        problem = _format_problem(named_arg.arg.as_string)
        if problem is not None:
            found.add("unsafe-format-string", "error", f"{where}/as_string", problem)


def _format_problem(text: str, depth: int = 0) -> str | None:
    """Why `text` as a `str.format` template reaches beyond its arguments, or None.

    By Python's format grammar a field name is an argument name or index followed by any
    number of `.attribute` and `[item]` accesses; a format spec may hold nested fields."""
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as exc:
        return f"not a format string: {exc}"
    for _, field, spec, _ in fields:
        if field is None:
            continue
        if "." in field or "[" in field:
            return f"the field {{{field}}} reads an attribute or item of an argument"
        if spec and depth < 2:
            problem = _format_problem(spec, depth + 1)
            if problem is not None:
                return problem
    return None


# ---------------------------------------------------------------- treespecs


def _treespec(text: str, at: str, found: FindingList) -> None:
    """torch's treespec JSON: refuse imports (enum contexts, defaultdict factories)."""
    try:
        spec = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        found.add("unsafe-treespec", "error", at, f"not a JSON treespec: {exc}")
        return
    if not (isinstance(spec, list) and len(spec) == 2 and spec[0] == 1):
        found.add("unsafe-treespec", "error", at, "not a treespec of protocol 1")
        return
    registered: set[str] = set()
    stack: list[Any] = [spec[1]]
    while stack:
        node = stack.pop()
        problem = _treespec_node(node, registered)
        if problem is not None:
            found.add("unsafe-treespec", "error", at, problem)
            return
        stack.extend(node["children_spec"])
    for name in sorted(registered):
        found.add(
            "treespec-type-to-register",
            "info",
            at,
            f"{name!r} is a user pytree type: pt2serde's workers use a stand-in built from the "
            "treespec, but a consumer's torch.export.load needs the library that registers it "
            "imported first",
        )


def _treespec_node(node: Any, registered: set[str]) -> str | None:
    """What is wrong with one treespec node, or None; plain type names go to `registered`."""
    if not (
        isinstance(node, dict)
        and set(node) == {"type", "context", "children_spec"}
        and isinstance(node["children_spec"], list)
    ):
        return "a treespec node must have exactly type, context and children_spec"
    kind, context = node["type"], node["context"]
    if kind is None:
        if context is not None or node["children_spec"]:
            return "a leaf must have no context and no children"
        return None
    if not isinstance(kind, str) or not _DOTTED.fullmatch(kind):
        return f"the node type {kind!r} is not a plain registered name"
    if kind == "collections.defaultdict":
        return _default_factory(context)
    if PYTREE_PLACEHOLDER in (kind, context):
        return f"{PYTREE_PLACEHOLDER!r} is torch's placeholder for a type without a name"
    if kind == "collections.namedtuple":
        if not isinstance(context, str) or not _DOTTED.fullmatch(context):
            return f"the namedtuple type {context!r} is not a plain registered name"
        registered.add(context)
        return None
    if kind not in BUILTIN_CONTAINERS:
        registered.add(kind)
    if not isinstance(context, str):
        return f"the context of {kind} must be a JSON string"
    parsed, enum = _torch_context(context)
    if enum:
        return f"the context of {kind} names an enum, which torch would import to load"
    if not parsed and kind in BUILTIN_CONTAINERS:
        # a registered type may bring its own context format; builtins never do
        return f"the context of {kind} is not JSON"
    return None


def _torch_context(context: str) -> tuple[bool, bool]:
    """(whether it parses, whether torch's enum hook would fire) for a treespec context, read
    as torch reads it: Python's `json.loads` with a hook on every object, which imports the
    module an `__enum__` object names as soon as that object is parsed, even if the parse
    fails later. Another parser differs from it (NaN, integers past 64 bits, lone surrogates,
    nesting), and a context it alone can read would hide an enum."""
    enum = False

    def hook(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal enum
        enum = enum or "__enum__" in obj
        return obj

    try:
        json.loads(context, object_hook=hook)
    except (ValueError, RecursionError):
        return False, enum
    return True, enum


def _default_factory(context: Any) -> str | None:
    if not (isinstance(context, dict) and isinstance(context.get("default_factory_name"), str)):
        return "a defaultdict context must name its default factory"
    module, name = context.get("default_factory_module"), context["default_factory_name"]
    if module != "builtins" or name not in SAFE_DEFAULT_FACTORIES:
        return f"the defaultdict factory {module}.{name} would be imported to load"
    return None


# ---------------------------------------------------------------- objects and pickles


def _custom_objects(doc: schema.ExportedProgram, severity: Severity, found: FindingList) -> None:
    seen: set[str] = set()
    for i, spec in enumerate(doc.graph_module.signature.input_specs):
        if isinstance(spec, schema.InputSpecCustomObj):
            seen.add(spec.custom_obj.arg.name)
            found.add(
                "unsafe-custom-object",
                severity,
                f"/graph_module/signature/input_specs/{i}/custom_obj",
                f"custom object {spec.custom_obj.custom_obj_name!r} "
                f"({spec.custom_obj.arg.class_fqn}) is loaded by unpickling",
            )
    for j, arg in enumerate(doc.graph_module.graph.inputs):
        if isinstance(arg, schema.ArgumentAsCustomObj) and arg.as_custom_obj.name not in seen:
            found.add(
                "unsafe-custom-object",
                severity,
                f"/graph_module/graph/inputs/{j}/as_custom_obj",
                f"custom object input {arg.as_custom_obj.name!r} "
                f"({arg.as_custom_obj.class_fqn}) is loaded by unpickling",
            )


def pickle_findings(pickled: Sequence[str], limits: Limits) -> list[Finding]:
    """The one rule for an archive's pickled members (tensor-subclass payloads, objects), which
    validation reports and every operation that writes or hands on a program enforces: an
    error unless the deployment carries opaque pickles, which are then copied as they are
    (never unpickled here) and merely warned of."""
    severity: Severity = "warning" if limits.allow_opaque_pickles else "error"
    return [
        Finding(
            code="unsafe-pickle",
            severity=severity,
            path="",
            message=f"archive member {member!r} is a pickle",
        )
        for member in pickled
        # example data, not the program: torch's loader must never be handed them (it falls
        # back to weights_only=False), which is the archive layer's business, not the screen's
        if not _SAMPLE_INPUTS.search(member)
    ]
