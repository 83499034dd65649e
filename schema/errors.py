"""Errors of the schema layer (no HTTP here): coded, with JSON-pointer paths."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem in a document: a stable code, a JSON pointer and a readable message."""

    code: str
    path: str
    message: str


class SchemaError(Exception):
    """Base of every error the schema package raises."""

    code = "schema-error"


class UnknownVersion(SchemaError):
    """A schema version that is not known, or not described."""

    code = "unknown-schema-version"


class DocumentInvalid(SchemaError):
    """A document that does not match the schema; `issues` lists every problem found."""

    code = "invalid-document"

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        first = issues[0] if issues else Issue(self.code, "", "invalid document")
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        super().__init__(f"{first.path or '/'}: {first.message}{more}")


class DescriptionInvalid(SchemaError):
    """A schema description (torch's schema.yaml shape) that cannot be read."""

    code = "invalid-description"


def pointer(parts: list[str | int]) -> str:
    """A JSON pointer (RFC 6901) from path segments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class UnsupportedMajor(SchemaError):
    """A document whose schema major version this package neither reads nor upgrades."""

    code = "unsupported-schema-major"
