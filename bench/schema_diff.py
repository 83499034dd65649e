"""Schema diff speed: `schema.diff` of two torch releases' schema.yaml, and of two described
versions, each at most 50 ms (best of 5), checked first against the changes read off the
release files themselves.

The check is an oracle of its own (`expected_changes`: removed, added, retyped, re-defaulted and
reordered fields, enum values and union arms, found by comparing the two files' dicts), which
tests/schema/test_diff.py uses on every pair of consecutive releases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

import schema
from bench.cases import Measured, time_ours
from bench.isolate import ChildFailed, Zygote
from bench.measure import CheckFailed
from bench.plan import Plan

#: torch's schema.yaml of every release, kept in the repository as test data.
HISTORY = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch-schema-history"
#: (label, old, new): two release files (by torch release), or two described versions.
PAIRS = (
    ("torch 2.5.0 → 2.15.0 schema.yaml", "2.5.0", "2.15.0"),
    ("described 8.2 → 8.20 (torch 2.6.0 → 2.15.0)", "8.2", "8.20"),
)
#: the release files the described versions are checked by.
RELEASE_OF = {"8.2": "2.6.0", "8.20": "2.15.0"}

Change = tuple[str, str, str, str]


def release(name: str) -> dict[str, Any]:
    """torch `name`'s schema.yaml, parsed."""
    text = (HISTORY / f"torch-{name}.schema.yaml").read_text()
    parsed: dict[str, Any] = yaml.load(text, Loader=yaml.CSafeLoader)
    return parsed


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


def measure_diffs(plan: Plan, zygote: Zygote) -> list[tuple[str, int, Measured]]:
    """(label, bytes of the files, figures) of each pair, each measured in a child of its own."""
    out: list[tuple[str, int, Measured]] = []
    for label, old, new in PAIRS:
        files = [RELEASE_OF.get(v, v) for v in (old, new)]
        size = sum((HISTORY / f"torch-{f}.schema.yaml").stat().st_size for f in files)
        try:
            m = zygote.run(diff_ours, plan, old, new)
        except ChildFailed as exc:
            m = Measured(failure=str(exc))
        out.append((label, size, m))
    return out


def diff_ours(plan: Plan, old: str, new: str) -> Measured:
    """`schema.diff` of two release files (parsed first) or of two described versions."""
    m = Measured(checked="the release files (changes read off them)")
    files = [release(RELEASE_OF.get(v, v)) for v in (old, new)]
    a: str | dict[str, Any] = old if old in RELEASE_OF else files[0]
    b: str | dict[str, Any] = new if new in RELEASE_OF else files[1]
    expected = expected_changes(*files)

    def check(d: schema.SchemaDiff) -> None:
        found = changes_of(d)
        if found != expected:
            wrong = sorted(found ^ expected)[:3]
            raise CheckFailed(f"{len(found ^ expected)} changes differ from the files', {wrong}")

    time_ours(m, plan, "diff", 0, lambda: schema.diff(a, b), check, 1 if plan.smoke else 5)
    return m
