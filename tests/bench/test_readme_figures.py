"""The README quotes the latest `make bench` run: its figures are RESULTS.md's, cell for cell."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the first markdown table in `text`."""
    lines = text.split("\n|", 1)[1].split("\n\n", 1)[0].splitlines()
    lines = ["|" + lines[0], *lines[1:]]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    header, _rule, *rows = cells
    return header, rows


def _bench_section(readme: str) -> str:
    return readme.split("\n## Benchmarks", 1)[1].split("\n## ", 1)[0]


def test_the_readme_quotes_the_latest_run_cell_for_cell() -> None:
    results = (ROOT / "bench" / "RESULTS.md").read_text()
    section = _bench_section((ROOT / "README.md").read_text())
    written = re.search(r"on (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", results)
    assert written is not None
    assert written.group(1) in section, "the README names another run than RESULTS.md's"
    results_header, results_rows = _table(results)
    header, rows = _table(section)
    assert rows, "the README's benchmark section has no table"
    assert set(header) <= set(results_header)
    by_key = {(r[0], r[1]): dict(zip(results_header, r, strict=True)) for r in results_rows}
    for row in rows:
        quoted = dict(zip(header, row, strict=True))
        measured = by_key.get((quoted["benchmark"], quoted["program"]))
        assert measured is not None, f"not a row of RESULTS.md: {row[:2]}"
        assert {k: measured[k] for k in header} == quoted
