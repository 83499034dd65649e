"""pt2serde's verdict on one document, per release: the one call the matrix checks."""

from __future__ import annotations

import importlib
from typing import Any

import schema
from bench.releases.matrix import Ours


def available() -> bool:
    """Whether this checkout has the release verdicts (app.releases)."""
    try:
        importlib.import_module("app.releases")
    except ModuleNotFoundError:
        return False
    return True


def verdicts(document: bytes) -> dict[str, Ours]:
    """`app.releases.verdicts` of a document (torch's JSON), by release."""
    releases: Any = importlib.import_module("app.releases")
    found: dict[str, Ours] = {}
    for verdict in releases.verdicts(schema.load(document)):
        why = verdict.reasons if not verdict.readable else verdict.ignoring
        found[verdict.release] = Ours(bool(verdict.readable), "; ".join(why))
    return found
