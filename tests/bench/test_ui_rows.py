"""The web UI's bench rows (bench/ui.py): `--only ui` (and `--only storage`) puts its section in
place in RESULTS.md, leaving every other section as it was; rows are judged against their
targets."""

from __future__ import annotations

from pathlib import Path

from bench import storage
from bench.programs import Program
from bench.report import KEPT_SECTIONS, replace_section
from bench.ui import HEADING, PAGES, Visits, rows

SECTION = f"{HEADING}\n\nnew figures\n"


def test_the_section_is_replaced_in_place_and_the_rest_kept() -> None:
    old = f"# results\n\n| table |\n\n{HEADING}\n\nold figures\n\n## Registry storage\n\nkept\n"
    assert replace_section(old, HEADING, SECTION) == (
        f"# results\n\n| table |\n\n{SECTION}\n## Registry storage\n\nkept\n"
    )
    at_end = f"# results\n\n{HEADING}\n\nold figures\n"
    assert replace_section(at_end, HEADING, SECTION) == f"# results\n\n{SECTION}"
    alone = f"{HEADING}\n\nold figures\n"
    assert replace_section(alone, HEADING, SECTION) == SECTION


def test_the_storage_section_is_replaced_between_the_others() -> None:
    new_storage = f"{storage.HEADING}\n\nnew bytes\n"
    old = f"# results\n\n{storage.HEADING}\n\nold bytes\n\n{HEADING}\n\nui figures\n"
    assert replace_section(old, storage.HEADING, new_storage) == (
        f"# results\n\n{new_storage}\n{HEADING}\n\nui figures\n"
    )
    assert "old bytes" in replace_section(old, HEADING, SECTION)


def test_a_first_section_goes_before_the_sections_tests_keep() -> None:
    assert not any(HEADING.startswith(kept) for kept in KEPT_SECTIONS)
    old = "# results\n\n| table |\n\n## Web UI: a 50,000-node graph in the browser\n\nkept\n"
    new = replace_section(old, HEADING, SECTION)
    assert new.index(HEADING) < new.index("## Web UI: a 50,000")
    assert new.endswith("## Web UI: a 50,000-node graph in the browser\n\nkept\n")
    assert replace_section("# results\n", HEADING, SECTION) == f"# results\n{SECTION}"


def test_rows_are_judged_on_cold_and_warm(tmp_path: Path) -> None:
    archive = tmp_path / "a.pt2"
    archive.write_bytes(b"x" * 1000)
    program = Program("decoder-50k", "", 50_007, b"", archive, lambda: ((), {}))
    met = Visits(PAGES[0], cold=0.8, warm=[0.3, 0.2], first=5.0)
    missed = Visits(PAGES[1], cold=1.4, warm=[0.3], first=5.0)
    failed = Visits(PAGES[2], failure="503 service busy")
    found = rows([met, missed, failed], [program, program])
    assert [r.status for r in found] == ["MET", "MISSED", "FAIL (503 service busy)"]
    assert found[0].ours == "800 ms / 200 ms"
