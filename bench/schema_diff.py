"""Schema diff speed: `schema.diff` of two torch releases' schema.yaml, and of two described
versions, each at most 50 ms (best of 5), checked first against the changes read off the
release files themselves.

The check is an oracle of its own (tests/schema/changes.py: removed, added, retyped, re-defaulted
and reordered fields, enum values and union arms, found by comparing the two files' dicts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import schema
from bench.cases import Measured, time_ours
from bench.isolate import ChildFailed, Zygote
from bench.measure import CheckFailed
from bench.plan import Plan
from tests.schema.changes import changes_of, expected_changes

#: torch's schema.yaml of every release, kept in the repository as test data.
HISTORY = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch-schema-history"
#: (label, old, new): two release files (by torch release), or two described versions.
PAIRS = (
    ("torch 2.5.0 → 2.15.0 schema.yaml", "2.5.0", "2.15.0"),
    ("described 8.2 → 8.20 (torch 2.6.0 → 2.15.0)", "8.2", "8.20"),
)
#: the release files the described versions are checked by.
RELEASE_OF = {"8.2": "2.6.0", "8.20": "2.15.0"}


def release(name: str) -> dict[str, Any]:
    """torch `name`'s schema.yaml, parsed."""
    text = (HISTORY / f"torch-{name}.schema.yaml").read_text()
    parsed: dict[str, Any] = yaml.load(text, Loader=yaml.CSafeLoader)
    return parsed


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
