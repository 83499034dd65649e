"""The changes between two torch schema.yaml files, read off the files themselves: an oracle
for `schema.diff` (tests/schema/test_diff.py checks every pair of consecutive releases by it,
and the bench's schema diff rows check their output by it before timing)."""

from __future__ import annotations

from typing import Any

import orjson

import schema

Change = tuple[str, str, str, str]


def change_key(rule: str, path: str, old: Any, new: Any) -> Change:
    """A change as a comparable tuple (values as JSON)."""
    return rule, path, orjson.dumps(old).decode(), orjson.dumps(new).decode()


def changes_of(d: schema.SchemaDiff) -> set[Change]:
    """The changes a diff reports, as comparable tuples."""
    return {change_key(c.rule, c.path, c.old, c.new) for c in d.changes}


def types_of(description: dict[str, Any]) -> dict[str, Any]:
    """The type entries of a description (not its SCHEMA_VERSION and TREESPEC_VERSION)."""
    return {k: v for k, v in description.items() if isinstance(v, dict)}


def expected_changes(a: dict[str, Any], b: dict[str, Any]) -> set[Change]:
    """What two parsed schema.yaml files show, read off them directly."""
    ta, tb = types_of(a), types_of(b)
    out = {change_key("type-removed", n, ta[n]["kind"], None) for n in ta.keys() - tb.keys()}
    out |= {change_key("type-added", n, None, tb[n]["kind"]) for n in tb.keys() - ta.keys()}
    for name in ta.keys() & tb.keys():
        kind = ta[name]["kind"]
        if kind != tb[name]["kind"]:
            out.add(change_key("kind-changed", name, kind, tb[name]["kind"]))
            continue
        out |= _field_changes(name, kind, ta[name]["fields"], tb[name]["fields"])
    return out


def _field_changes(name: str, kind: str, fa: dict[str, Any], fb: dict[str, Any]) -> set[Change]:
    out: set[Change] = set()
    removed = {"enum": "enum-value-removed", "union": "union-arm-removed"}
    for f in fa.keys() - fb.keys():
        out.add(change_key(removed.get(kind, "field-removed"), f"{name}.{f}", fa[f], None))
    for f in fb.keys() - fa.keys():
        if kind == "enum":
            rule = "enum-value-added"
        elif kind == "union":
            rule = "union-arm-added"
        else:
            rule = "field-added-with-default" if "default" in fb[f] else "field-added-required"
        out.add(change_key(rule, f"{name}.{f}", None, fb[f]))
    for f in fa.keys() & fb.keys():
        old, new, path = fa[f], fb[f], f"{name}.{f}"
        if kind == "enum":
            if old != new:
                out.add(change_key("enum-value-renumbered", path, old, new))
            continue
        if old["type"] != new["type"]:
            out.add(change_key("field-type-changed", path, old["type"], new["type"]))
        d_old, d_new = old.get("default"), new.get("default")
        if d_old is not None and d_new is not None and d_old != d_new:
            out.add(change_key("default-changed", path, d_old, d_new))
        elif d_old is None and d_new is not None:
            out.add(change_key("default-added", path, None, d_new))
        elif d_old is not None and d_new is None:
            out.add(change_key("default-removed", path, d_old, None))
    order_a = [f for f in fa if f in fb]
    order_b = [f for f in fb if f in fa]
    if order_a != order_b:
        out.add(change_key("field-order-changed", name, order_a, order_b))
    return out
