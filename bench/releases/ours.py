"""pt2serde's verdict on one document, per release: the one call the matrix checks."""

from __future__ import annotations

import schema
from app.releases import verdicts as release_verdicts
from bench.releases.matrix import Ours


def verdicts(document: bytes) -> dict[str, Ours]:
    """`app.releases.verdicts` of a document (torch's JSON), by release."""
    found: dict[str, Ours] = {}
    for verdict in release_verdicts(schema.load(document)):
        why = verdict.reasons if not verdict.readable else verdict.ignoring
        found[verdict.release] = Ours(verdict.readable, "; ".join(why))
    return found
