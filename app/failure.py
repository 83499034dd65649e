"""The root of every coded failure below the HTTP layer (archive, programs, bridge, registry)."""

from __future__ import annotations

from schema import Issue


class Failure(Exception):
    """A coded, human-readable failure; `issues` carries per-path details where there are any."""

    def __init__(self, code: str, message: str, issues: list[Issue] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.issues = issues or []

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
