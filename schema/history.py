"""Which schema versions exist and which torch releases wrote them."""

from __future__ import annotations

from dataclasses import dataclass

from schema._base import FIRST_8X, Version
from schema.errors import UnknownVersion

#: The version pt2serde reads and writes natively (torch 2.13).
CURRENT: Version = (8, 20)
#: Every version a torch release wrote into its schema.yaml, with those releases.
RELEASES: dict[Version, tuple[str, ...]] = {
    (5, 1): ("2.3.0", "2.3.1"),
    (5, 3): ("2.4.0", "2.4.1"),
    (7, 3): ("2.5.0", "2.5.1"),
    (8, 2): ("2.6.0",),
    (8, 7): ("2.7.0", "2.7.1"),
    (8, 8): ("2.8.0",),
    (8, 14): ("2.9.0", "2.9.1"),
    (8, 15): ("2.10.0",),
    (8, 17): ("2.11.0",),
    (8, 20): ("2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"),
}
TREESPEC_VERSION = 1


@dataclass(frozen=True)
class KnownVersion:
    """A schema version, the torch releases that write it, and whether it can be described."""

    version: Version
    torch_releases: tuple[str, ...]
    describable: bool

    @property
    def label(self) -> str:
        """The version as ``major.minor``."""
        return format_version(self.version)


def format_version(version: Version) -> str:
    """``(8, 20)`` -> ``"8.20"``."""
    return f"{version[0]}.{version[1]}"


def parse_version(text: str | Version) -> Version:
    """Accept ``"8.20"``, ``"8_20"`` or ``(8, 20)``; refuse anything else."""
    if isinstance(text, tuple):
        return text
    parts = text.replace("_", ".").split(".")
    if len(parts) != 2 or not all(p.isdigit() and len(p) <= 4 for p in parts):
        raise UnknownVersion(f"not a schema version: {text!r} (expected major.minor, e.g. 8.20)")
    return int(parts[0]), int(parts[1])


def versions() -> list[KnownVersion]:
    """Every known schema version, oldest first."""
    return [
        KnownVersion(v, releases, describable=v[0] == FIRST_8X[0])
        for v, releases in sorted(RELEASES.items())
    ]


def describable(version: str | Version) -> Version:
    """The version as a tuple, if it is a known 8.x version; else UnknownVersion."""
    parsed = parse_version(version)
    if parsed not in RELEASES or parsed[0] != FIRST_8X[0]:
        known = ", ".join(format_version(v) for v in RELEASES if v[0] == FIRST_8X[0])
        label = format_version(parsed)
        if parsed in RELEASES:
            # Listed (compatibility answers name its releases), but our models hold the 8.x
            # history only: older majors changed field types, which they do not record.
            raise UnknownVersion(
                f"schema version {label} (torch {', '.join(RELEASES[parsed])}) is known but not "
                f"describable: descriptions exist for the 8.x versions only ({known})"
            )
        raise UnknownVersion(f"schema version {label} is not known; describable: {known}")
    return parsed
