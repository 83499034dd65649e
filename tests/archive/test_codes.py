"""The archive layer's failure codes: registered, raised and tested, each one."""

from __future__ import annotations

import re
from pathlib import Path

from app.archive import CODES

ROOT = Path(__file__).resolve().parents[2]
CODE = re.compile(r'"(archive-[a-z0-9-]+)"')


def codes_in(paths: list[Path]) -> set[str]:
    """Every "archive-..." string literal in the given files."""
    return {code for path in paths for code in CODE.findall(path.read_text())}


def test_every_raised_code_is_registered() -> None:
    raised = codes_in(sorted((ROOT / "app" / "archive").glob("*.py")))
    assert raised - set(CODES) == set()
    assert set(CODES) - raised == set()


def test_every_code_is_tested() -> None:
    tested = codes_in(sorted(Path(__file__).parent.glob("test_*.py")))
    assert set(CODES) - tested == set()
