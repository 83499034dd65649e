"""The record of the last `make releases` run (tests/data/releases/): each release's real loads of
every program each release saved, and pt2serde's verdicts on the same documents.

bench/releases/ writes the record (and its tables); tests/releases/ checks the verdicts against it
without the release venvs. Nothing here starts a process or imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import schema
from app.releases import verdicts as release_verdicts

#: A cell the reader loaded (`torch.export.load` and `.module()` both succeeded) or did not.
LOADS, FAILS = "loads", "fails"
#: where the record is kept
DATA = Path(__file__).resolve().parents[1] / "data" / "releases"


@dataclass(frozen=True)
class Load:
    """One real load: the first stage that failed ("load", "module" or "run") and its error."""

    stage: str | None
    error: str | None

    @property
    def loads(self) -> bool:
        """Whether the reader loaded it: only a failure to run on this CPU still counts."""
        return self.stage in (None, "run")

    def to_json(self) -> dict[str, Any]:
        """The form loads.json keeps."""
        return {"loads": self.loads, "stage": self.stage, "error": self.error}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Load:
        """The inverse of to_json (the `loads` flag is derived, so it is checked, not trusted)."""
        load = cls(data["stage"], data["error"])
        if load.loads != data["loads"]:
            raise ValueError(f"inconsistent record {data}")
        return load


#: writer release -> program -> reader release -> the real load
Truth = dict[str, dict[str, dict[str, Load]]]


@dataclass(frozen=True)
class Ours:
    """pt2serde's verdict for one (document, reader release) and why."""

    readable: bool
    why: str


@dataclass(frozen=True)
class Disagreement:
    """A (document, reader) pair where our verdict and the real load differ."""

    writer: str
    program: str
    reader: str
    real: Load
    ours: Ours

    def line(self) -> str:
        """One markdown list item."""
        said = "readable" if self.ours.readable else "not readable"
        real = LOADS if self.real.loads else f"fails ({self.real.stage}: {self.real.error})"
        why = f" ({self.ours.why})" if self.ours.why else ""
        return (
            f"- {self.writer} `{self.program}` read by {self.reader}: {real}; we said {said}{why}"
        )


def truth_from_json(data: dict[str, Any]) -> Truth:
    """The ground truth kept in loads.json."""
    return {
        writer: {
            program: {reader: Load.from_json(cell) for reader, cell in readers.items()}
            for program, readers in programs.items()
        }
        for writer, programs in data["loads"].items()
    }


def truth_to_json(truth: Truth) -> dict[str, Any]:
    """The inverse of truth_from_json's `loads` member."""
    return {
        writer: {
            program: {reader: load.to_json() for reader, load in readers.items()}
            for program, readers in programs.items()
        }
        for writer, programs in truth.items()
    }


def disagreements(truth: Truth, ours: dict[tuple[str, str], dict[str, Ours]]) -> list[Disagreement]:
    """Every (document, reader) whose verdict differs from the real load, in table order."""
    found = []
    for writer, programs in truth.items():
        for program, readers in programs.items():
            verdicts = ours.get((writer, program), {})
            for reader, load in readers.items():
                verdict = verdicts.get(reader)
                if verdict is not None and verdict.readable != load.loads:
                    found.append(Disagreement(writer, program, reader, load, verdict))
    return found


def stored() -> tuple[dict[str, Any], Truth]:
    """loads.json and the ground truth it records."""
    data: dict[str, Any] = json.loads((DATA / "loads.json").read_text())
    return data, truth_from_json(data)


def our_verdicts(document: bytes) -> dict[str, Ours]:
    """`app.releases.verdicts` of a document (torch's JSON), by release."""
    found: dict[str, Ours] = {}
    for verdict in release_verdicts(schema.load(document)):
        why = verdict.reasons if not verdict.readable else verdict.ignoring
        found[verdict.release] = Ours(verdict.readable, "; ".join(why))
    return found


def stored_verdicts(truth: Truth) -> dict[tuple[str, str], dict[str, Ours]]:
    """Our verdict on every stored document."""
    return {
        (writer, program): our_verdicts((DATA / writer / f"{program}.json").read_bytes())
        for writer, programs in truth.items()
        for program in programs
    }
