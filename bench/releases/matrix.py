"""The release matrix's pure parts: real-load results, their comparison with our verdicts, tables.

Nothing here starts a process or imports torch, so the tests run it on stored results.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

#: A cell the reader loaded (`torch.export.load` and `.module()` both succeeded) or did not.
LOADS, FAILS = "loads", "fails"
#: Appended to a cell where pt2serde's verdict said the opposite of the real load.
DISAGREES = " ≠"
BEGIN, END = "<!-- releases-table:begin -->", "<!-- releases-table:end -->"


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


def parse_lines(text: str) -> dict[tuple[str, str], Load]:
    """A reader's JSON lines (bench/releases/load_programs.py) by (writer, program)."""
    found: dict[tuple[str, str], Load] = {}
    for line in text.splitlines():
        if line.strip():
            record = json.loads(line)
            found[record["writer"], record["program"]] = Load(record["stage"], record["error"])
    return found


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


def render_table(truth: Truth, readers: list[str], disagree: list[Disagreement]) -> str:
    """Rows writer x program, columns reader releases, `≠` where our verdict said otherwise."""
    marked = {(d.writer, d.program, d.reader) for d in disagree}
    lines = [
        "| written by | program | " + " | ".join(readers) + " |",
        "| --- | --- | " + " | ".join("---" for _ in readers) + " |",
    ]
    for writer, programs in truth.items():
        for program, cells in programs.items():
            row = []
            for reader in readers:
                load = cells.get(reader)
                cell = "" if load is None else (LOADS if load.loads else FAILS)
                row.append(cell + (DISAGREES if (writer, program, reader) in marked else ""))
            lines.append(f"| {writer} | `{program}` | " + " | ".join(row) + " |")
    return "\n".join(lines)


def failures_by_error(truth: Truth) -> list[str]:
    """Markdown list items: each distinct failure with the (writer -> reader) pairs it hit."""
    pairs: dict[str, list[str]] = defaultdict(list)
    for writer, programs in truth.items():
        for program, readers in programs.items():
            for reader, load in readers.items():
                if load.stage is not None:
                    pairs[f"{load.stage}: `{load.error}`"].append(
                        f"{writer} `{program}` -> {reader}"
                    )
    return [
        f"- {error} ({len(hits)}): " + ", ".join(hits[:6]) + (", ..." if len(hits) > 6 else "")
        for error, hits in sorted(pairs.items(), key=lambda item: -len(item[1]))
    ]


def between_markers(text: str) -> str:
    """The text between the table's marker comments (ValueError when they are missing)."""
    if BEGIN not in text or END not in text:
        raise ValueError("no release table markers")
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def replace_between_markers(text: str, block: str) -> str:
    """`text` with the part between the marker comments replaced by `block`."""
    between_markers(text)
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{block.strip()}\n{END}{rest.split(END, 1)[1]}"
