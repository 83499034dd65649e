"""pt2serde: serialization service for torch exported programs."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    """The installed pt2serde distribution's version, from its metadata (read when asked: the
    scan costs every command that does not need it)."""
    return importlib.metadata.version("pt2serde")
