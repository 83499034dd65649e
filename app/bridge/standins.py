"""Stand-in pytree types, so torch can load a program without the library that defined its types.

A document's treespecs (module call signatures) name the user's pytree types only by their
serialized names: a namedtuple as `{"type": "collections.namedtuple", "context": "<name>"}`, a
dataclass, a Hugging Face `ModelOutput` or any other registered node as `{"type": "<name>",
"context": "<JSON text>"}`. torch's `treespec_loads` looks each name up in its registry and fails
when the defining module was never imported. Here every such name torch does not know gets a
stand-in class for the length of one load: a namedtuple with the fields the document records
(`treespec_namedtuple_fields`), or a node that keeps its children and its context text as they
are. Nothing is imported: the stand-ins are built from the document's strings alone.

What is written back comes from the document, so the archive keeps naming the original types,
byte for byte; a consumer with the real library loads the real types. Registrations are undone
when the load ends (and torch's treespec cache cleared), so a worker that runs many jobs never
lets one document's stand-ins shape another's.
"""

from __future__ import annotations

import collections
import keyword
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from torch.utils import _pytree as pytree

import schema

#: How torch's treespec JSON names a namedtuple node; its context is the type's serialized name.
NAMEDTUPLE = "collections.namedtuple"

#: torch's pytree registries are process-wide: one load with stand-ins at a time.
_LOCK = threading.RLock()


@dataclass(frozen=True)
class StandInType:
    """A user pytree type a document names and the installed torch does not know."""

    name: str
    #: namedtuple field names; None for other node types (their context carries what they need).
    fields: tuple[str, ...] | None


class StandIn:
    """An instance of a user pytree node type, built by torch in place of the real one."""

    #: the serialized type name the document uses (set on each per-load subclass).
    serialized_type_name = ""

    def __init__(self, children: Iterable[Any], context: str) -> None:
        self.children = list(children)
        self.context = context

    def __repr__(self) -> str:
        return f"StandIn[{self.serialized_type_name}]({self.children!r}, {self.context!r})"


def unknown_types(doc: schema.ExportedProgram) -> list[StandInType]:
    """The pytree types the document's treespecs name that this process has not registered."""
    registered = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
    recorded = doc.graph_module.treespec_namedtuple_fields
    found: dict[str, StandInType] = {}
    for node in _treespec_nodes(doc):
        kind, context, children = node["type"], node["context"], node["children_spec"]
        if kind == NAMEDTUPLE and isinstance(context, str):
            if context not in registered and context not in found:
                known = recorded.get(context)
                fields = (
                    tuple(known.field_names)
                    if known is not None
                    else tuple(f"field{i}" for i in range(len(children)))
                )
                found[context] = StandInType(context, fields)
        elif isinstance(kind, str) and kind not in registered and kind not in found:
            found[kind] = StandInType(kind, None)
    return list(found.values())


@contextmanager
def stand_ins(doc: schema.ExportedProgram) -> Iterator[list[StandInType]]:
    """Register a stand-in for every pytree type `doc` names that torch does not know, for the
    length of the block; afterwards torch's registries are as they were."""
    with _LOCK:
        types = unknown_types(doc)
        classes: list[type] = []
        # treespec_loads is lru-cached by string: a cached spec may hold another load's class.
        pytree.treespec_loads.cache_clear()
        try:
            for standin in types:
                classes.append(_register(standin))
            yield types
        finally:
            for cls in reversed(classes):
                pytree._deregister_pytree_node(cls)
            pytree.treespec_loads.cache_clear()


def _register(standin: StandInType) -> type:
    short = _identifier(standin.name.rpartition(".")[2], "StandIn")
    if standin.fields is not None:
        # rename=True turns a field name that is no identifier into `_<index>` (the real type's
        # names stay in the document, which is what is written back).
        tuple_cls: type = collections.namedtuple(short, standin.fields, rename=True)  # type: ignore[misc]
        tuple_cls.__module__ = __name__
        pytree._register_namedtuple(tuple_cls, serialized_type_name=standin.name)
        return tuple_cls
    attributes = {"__module__": __name__, "serialized_type_name": standin.name}
    node_cls = type(short, (StandIn,), attributes)
    pytree._private_register_pytree_node(
        node_cls,
        _flatten,
        lambda children, context: node_cls(children, context),
        serialized_type_name=standin.name,
        # The context stays the document's JSON text: torch never parses it (no enum imports)
        # and would write it back unchanged.
        to_dumpable_context=_same,
        from_dumpable_context=_same,
    )
    return node_cls


def _flatten(node: StandIn) -> tuple[list[Any], str]:
    return node.children, node.context


def _same(context: Any) -> Any:
    return context


def _identifier(name: str, fallback: str) -> str:
    return name if name.isidentifier() and not keyword.iskeyword(name) else fallback


def _treespec_nodes(doc: schema.ExportedProgram) -> Iterator[dict[str, Any]]:
    """Every non-leaf node of the module call signatures' treespecs (malformed ones skipped:
    the screen refuses them, and torch reports what it makes of them)."""
    for entry in doc.graph_module.module_call_graph:
        signature = entry.signature
        if signature is None:
            continue
        for text in (signature.in_spec, signature.out_spec):
            try:
                spec = orjson.loads(text)
            except orjson.JSONDecodeError:
                continue
            if not (isinstance(spec, list) and len(spec) == 2):
                continue
            stack: list[Any] = [spec[1]]
            while stack:
                node = stack.pop()
                if not (
                    isinstance(node, dict)
                    and isinstance(node.get("children_spec"), list)
                    and "type" in node
                    and "context" in node
                ):
                    continue
                if node["type"] is not None:
                    yield node
                stack.extend(node["children_spec"])
