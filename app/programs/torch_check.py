"""What the installed torch says of a document, as plain data (torch-free: the API reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schema import Issue


@dataclass(frozen=True)
class TorchCheck:
    """What the installed torch says of a document: issues, namespaces it lacks, checks not run."""

    issues: list[Issue] = field(default_factory=list)
    namespaces_to_register: list[str] = field(default_factory=list)
    unchecked: list[Issue] = field(default_factory=list)
    #: the torch release that checked (`2.13.0`), set by the job that ran the check
    torch: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for a worker's reply or a response body)."""
        return {
            "issues": [_issue_dict(i) for i in self.issues],
            "namespaces_to_register": list(self.namespaces_to_register),
            "unchecked": [_issue_dict(i) for i in self.unchecked],
            "torch": self.torch,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TorchCheck:
        """The inverse of `to_dict`."""
        return cls(
            [Issue(**i) for i in data["issues"]],
            list(data["namespaces_to_register"]),
            [Issue(**i) for i in data["unchecked"]],
            str(data.get("torch", "")),
        )


def _issue_dict(issue: Issue) -> dict[str, str]:
    return {"code": issue.code, "path": issue.path, "message": issue.message}
