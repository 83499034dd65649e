"""The operator registry of the running torch, as plain data (part of a release's rules file).

`app/bridge/release_dump.py` calls it in a fresh process of each release's venv (torch and the
standard library only, so it runs in any of them). What is recorded is what a fresh process
resolves when it runs `torch.export.load`: everything registered by `import torch` plus the
imports of torch's export deserializer (`torch._export.serde.serialize`, which adds e.g.
`c10d_functional`, `fsdp`, `streams`, and the triton/trace HOPs). Nothing else is imported, so
namespaces torch only registers on demand (`quantized_decomposed`, registered by
`torch.ao.quantization.fx._decomposed`; inductor's extra `prims`, registered while exporting)
are custom namespaces to the screen, as they are to a fresh `torch.export.load`.

Recorded: every schema of the JIT operator registry (which `torch.ops.<ns>.<op>` resolves and
which holds every dispatcher operator too; the dispatcher is read as well so that a schema it
alone has is not lost), the higher-order operators, and the Python callables torch writes as
node targets (those its serializer writes and its verifier admits, kept only when its
deserializer resolves the written name back to the same callable).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterator
from typing import Any

import torch
from torch._export.serde import serialize as torch_serde
from torch._export.verifier import Verifier

#: Version of the file's layout (not torch's): bump when the shape below changes.
FORMAT = 1
#: Type constructors whose parentheses hold types; any other parenthesis in a type is an alias.
_CONSTRUCTORS = frozenset({"Dict", "Future", "RRef", "Await", "Union", "Tuple"})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def registry() -> dict[str, Any]:
    """The whole registry as plain data, sorted (deterministic for a given torch)."""
    schemas = {(s.name, s.overload_name): s for s in torch._C._jit_get_all_schemas()}
    for qualified in torch._C._dispatch_get_all_op_names():
        name, _, overload = qualified.partition(".")
        if (name, overload) not in schemas:
            schemas[(name, overload)] = torch._C._dispatch_find_schema_or_throw(
                name, overload
            ).schema()
    operators: dict[str, dict[str, Any]] = {}
    for (qualified, overload), schema in sorted(schemas.items()):
        if overload == "default":
            raise RuntimeError(f"{qualified} has an overload named 'default'")
        operators.setdefault(qualified, {})[overload or "default"] = _overload(schema)
    for qualified, entries in operators.items():
        namespace, _, name = qualified.partition("::")
        for overload, entry in entries.items():
            if not _reachable(qualified, overload):
                entry["unreachable"] = True
            if _numbers_as_tensors(namespace, name):
                entry["numbers_as_tensors"] = True
    return {
        "format": FORMAT,
        "torch": torch.__version__,
        "operators": operators,
        "higher_order": sorted(torch._ops._higher_order_ops),
        "python_targets": sorted(_python_targets()),
        "attributes": _attributes(),
    }


# ---------------------------------------------------------------- schemas


def _overload(schema: Any) -> dict[str, Any]:
    text = str(schema)
    start = text.index("(")
    end = _closing(text, start)
    if not text.startswith(" -> ", end + 1):
        raise RuntimeError(f"unexpected schema text {text!r}")
    items = _split(text[start + 1 : end])
    tail = text[end + 5 :]
    entry: dict[str, Any] = {}
    if items and items[-1] == "...":
        entry["vararg"] = True
        items.pop()
    arguments = []
    kwarg_only = False
    for item in items:
        if item == "*":
            kwarg_only = True
            continue
        arguments.append(_argument(item, kwarg_only))
    _agree(text, arguments, schema.arguments, arguments=True)
    entry["arguments"] = arguments
    if tail == "...":
        entry["varret"] = True
        returns: list[dict[str, Any]] = []
    else:
        returns = [_returned(item) for item in _returns(tail, len(schema.returns))]
    _agree(text, returns, schema.returns, arguments=False)
    entry["returns"] = returns
    return entry


def _returns(text: str, count: int) -> list[str]:
    if text.startswith("(") and _closing(text, 0) == len(text) - 1:
        inner = _split(text[1:-1])
        if len(inner) == count:
            return inner
    return [text]


def _argument(item: str, kwarg_only: bool) -> dict[str, Any]:
    kind, rest = _type_prefix(item)
    name, equals, default = rest.partition("=")
    out = _typed(kind)
    out["name"] = name
    if equals:
        out["default"] = default
    if kwarg_only:
        out["kwarg_only"] = True
    return out


def _returned(item: str) -> dict[str, Any]:
    kind, rest = _type_prefix(item)
    out = _typed(kind)
    if rest:
        out["name"] = rest
    return out


def _typed(kind: str) -> dict[str, Any]:
    bare, aliases = _strip_aliases(kind)
    out: dict[str, Any] = {"type": bare}
    if len(aliases) > 1:
        raise RuntimeError(f"{kind!r} has several alias annotations; the format holds one")
    if aliases:
        out["alias"] = aliases[0]
    return out


def _agree(text: str, parsed: list[dict[str, Any]], bound: Any, *, arguments: bool) -> None:
    """Our reading of the schema text must match torch's bound objects field by field."""
    if len(parsed) != len(bound):
        raise RuntimeError(f"{text!r}: {len(parsed)} items read, torch has {len(bound)}")
    for mine, theirs in zip(parsed, bound, strict=True):
        same = mine.get("name", "") == theirs.name and ("alias" in mine) == (
            theirs.alias_info is not None
        )
        if arguments:
            same = (
                same
                and mine.get("kwarg_only", False) == theirs.kwarg_only
                and ("default" in mine) == theirs.has_default_value()
            )
        if not same:
            raise RuntimeError(f"{text!r}: item {mine} disagrees with torch's {theirs.name!r}")


def _split(text: str) -> list[str]:
    """Comma-separated items at nesting depth 0, outside string literals."""
    items: list[str] = []
    start = 0
    for i, char, depth in _scan(text, 0):
        if char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        items.append(tail)
    return items


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at `start`."""
    for i, char, depth in _scan(text, start):
        if char in ")]" and depth == 0:
            return i
    raise RuntimeError(f"unbalanced {text!r}")


def _scan(text: str, start: int) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth after it) outside string literals (defaults hold some)."""
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        char = text[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char in "\"'":
            quote = char
            continue
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        yield i, char, depth


def _type_prefix(item: str) -> tuple[str, str]:
    """(type text, the rest) of `<type> <name>[=default]`: the type ends at a space at depth 0."""
    depth = 0
    for i, char in enumerate(item):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == " " and depth == 0:
            return item[:i], item[i + 1 :]
    return item, ""


def _strip_aliases(kind: str) -> tuple[str, list[str]]:
    """The type without alias annotations, and the annotations in order of appearance."""
    bare: list[str] = []
    aliases: list[str] = []
    i = 0
    while i < len(kind):
        word = _WORD.match(kind, i)
        if word:
            bare.append(word.group())
            i = word.end()
            if word.group() in _CONSTRUCTORS and kind.startswith("(", i):
                i = _group(kind, i, bare, aliases)
            continue
        if kind[i] == "(" and bare and (bare[-1][-1:].isalnum() or bare[-1][-1:] in ")]?_"):
            end = _closing(kind, i)
            aliases.append(kind[i + 1 : end])
            i = end + 1
            continue
        if kind[i] == "(":
            i = _group(kind, i, bare, aliases)
            continue
        bare.append(kind[i])
        i += 1
    return "".join(bare), aliases


def _group(kind: str, start: int, bare: list[str], aliases: list[str]) -> int:
    """Strip the parenthesized group opening at `start` into `bare` and `aliases`; the index
    after it."""
    end = _closing(kind, start)
    inner, nested = _strip_aliases(kind[start + 1 : end])
    bare.append(f"({inner})")
    aliases.extend(nested)
    return end + 1


# ---------------------------------------------------------------- how torch resolves names


def _reachable(qualified: str, overload: str) -> bool:
    """Whether `torch.ops.<ns>.<name>.<overload>` resolves to this overload by attribute lookup,
    as torch's deserializer resolves it (`aten::name` is shadowed by `_OpNamespace.name`)."""
    namespace, _, name = qualified.partition("::")
    found: Any = torch.ops
    for part in (namespace, name, overload):
        try:
            found = getattr(found, part)
        except (AttributeError, RuntimeError):
            return False
    schema = getattr(found, "_schema", None)
    return (
        isinstance(found, torch._ops.OpOverload)
        and schema is not None
        and (schema.name, schema.overload_name or "default") == (qualified, overload)
    )


def _numbers_as_tensors(namespace: str, name: str) -> bool:
    """Whether calling the operator takes a Python number for a Tensor argument (torch wraps it):
    every prim and the few aten operators torch lists (`add`, `mul`, `sub`, `to`, ...)."""
    if namespace == "prims":
        return True
    return namespace == "aten" and torch._C._should_allow_numbers_as_tensors(name)


def _attributes() -> dict[str, list[str]]:
    """Names that reach an attribute of the objects on the way to an operator (`torch.ops`, a
    namespace, an operator packet, the higher-order namespace) instead of an operator."""
    packet = torch.ops.aten.add
    levels = {
        "ops": (torch.ops, torch._ops._OpNamespace),
        "namespace": (torch.ops.aten, torch._ops.OpOverloadPacket),
        "packet": (packet, torch._ops.OpOverload),
        "higher_order": (torch.ops.higher_order, torch._ops.HigherOrderOperator),
    }
    out = {}
    for level, (instance, child) in levels.items():
        # what the object caches for operators it has handed out is not an attribute of its own
        own = {k for k, v in vars(instance).items() if not isinstance(v, child)}
        out[level] = sorted(own | set(dir(type(instance))))
    return out


# ---------------------------------------------------------------- python targets


def _python_targets() -> Iterator[str]:
    """Names of the Python callables torch writes as node targets and reads back as themselves."""
    writer = torch_serde.GraphModuleSerializer.__new__(torch_serde.GraphModuleSerializer)
    reader = torch_serde.GraphModuleDeserializer.__new__(torch_serde.GraphModuleDeserializer)
    candidates = [
        *_sym_ops(),
        *Verifier().allowed_builtin_ops(),
        *_verifier_torch_functions(),
    ]
    for function in candidates:
        name = writer.serialize_operator(function)
        if reader.deserialize_operator(name) is function:
            yield name


def _sym_ops() -> list[Any]:
    """The symbolic operators torch's serializer writes by name: one set from 2.8, three before."""
    if hasattr(torch_serde, "_SYM_OPS"):
        return list(torch_serde._SYM_OPS)
    kinds = ("_SYM_INT_OPS", "_SYM_FLOAT_OPS", "_SYM_BOOL_OPS")
    return [op for kind in kinds for op in getattr(torch_serde, kind)]


def _verifier_torch_functions() -> list[Any]:
    """The verifier's `_allowed_torch_functions`, a tuple local to one of its methods."""
    source = textwrap.dedent(inspect.getsource(Verifier._check_graph_module))
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Assign)
            and any(
                isinstance(t, ast.Name) and t.id == "_allowed_torch_functions" for t in node.targets
            )
            and isinstance(node.value, ast.Tuple)
        ):
            return [_resolve(ast.unparse(element)) for element in node.value.elts]
    raise RuntimeError("torch's verifier no longer has _allowed_torch_functions")


def _resolve(dotted: str) -> Any:
    head, *names = dotted.split(".")
    if head != "torch":
        raise RuntimeError(f"unexpected verifier entry {dotted!r}")
    found: Any = torch
    for name in names:
        found = getattr(found, name)
    return found
