"""The release matrix's tables and the loaders' output, read and written without torch (the record
itself, its loads and our verdicts, is tests/releases/record.py).
"""

from __future__ import annotations

import json
from collections import defaultdict

from tests.releases.record import FAILS, LOADS, Disagreement, Load, Truth

#: Appended to a cell where pt2serde's verdict said the opposite of the real load.
DISAGREES = " ≠"
BEGIN, END = "<!-- releases-table:begin -->", "<!-- releases-table:end -->"


def parse_lines(text: str) -> dict[tuple[str, str], Load]:
    """A reader's JSON lines (bench/releases/load_programs.py) by (writer, program)."""
    found: dict[tuple[str, str], Load] = {}
    for line in text.splitlines():
        if line.strip():
            record = json.loads(line)
            found[record["writer"], record["program"]] = Load(record["stage"], record["error"])
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
