"""Findings: what validation, the screen and the operator check report, and the report itself."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["error", "warning", "info"]
Level = Literal["schema", "semantic", "torch"]

#: Findings of one code past this many are dropped and counted in a `findings-truncated` note.
MAX_FINDINGS_PER_CODE = 200


class Finding(BaseModel):
    """One problem or note: a stable code, its severity, a JSON pointer and a message."""

    model_config = ConfigDict(frozen=True)

    code: str
    severity: Severity
    path: str
    message: str


class Report(BaseModel):
    """The outcome of validating one document at one level."""

    valid: bool
    level: Level
    findings: list[Finding]
    #: JSON pointers of keys the schema does not declare (kept, and reported as warnings).
    unknown_fields: list[str]
    #: the oldest schema version that has every field, arm and enum value the document uses
    min_schema_version: str
    #: the oldest torch release whose `torch.export.load` loads the document losing nothing
    #: (its schema, reader policy and operators: `app.releases.verdicts`), "" if none does
    oldest_torch_release: str
    #: every release we hold rules for that loads it losing nothing, oldest first (not always a
    #: range: an operator a release dropped leaves a gap after it)
    readable_by: list[str] = []
    #: custom operator namespaces a torch process must import before loading the program
    namespaces_to_register: list[str]
    #: what this report did not check: "semantic", "safety", "weights", "torch"
    unchecked: list[str]


class FindingList:
    """Collects findings, keeping at most MAX_FINDINGS_PER_CODE of each code."""

    def __init__(self) -> None:
        self._items: list[Finding] = []
        self._counts: Counter[str] = Counter()

    def add(self, code: str, severity: Severity, path: str, message: str) -> None:
        """Record a finding (or only count it, past the per-code limit)."""
        self._counts[code] += 1
        if self._counts[code] <= MAX_FINDINGS_PER_CODE:
            self._items.append(Finding(code=code, severity=severity, path=path, message=message))

    def extend(self, findings: Iterable[Finding]) -> None:
        """Record findings made elsewhere."""
        for f in findings:
            self.add(f.code, f.severity, f.path, f.message)

    def result(self) -> list[Finding]:
        """The findings kept, with a note per code that had more."""
        notes = [
            Finding(
                code="findings-truncated",
                severity="info",
                path="",
                message=f"{count - MAX_FINDINGS_PER_CODE} more {code!r} findings not listed",
            )
            for code, count in self._counts.items()
            if count > MAX_FINDINGS_PER_CODE
        ]
        return [*self._items, *notes]
