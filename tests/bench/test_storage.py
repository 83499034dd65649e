"""The storage section of the bench judges its figures against the issue's targets: stored bytes
of a fine-tune series at most 0.50x its archives, a bfloat16 model alone at most 0.80x, push and
pull at least 0.8 of the raw rates, and a pull that differs from its push is a failure."""

from __future__ import annotations

import pytest

from app.settings import MiB
from bench.storage import Rates, Stored, section
from tests.finetunes import LARGE


def _stored(dtype: str, base: float, series: float) -> Stored:
    archive = 100 * MiB
    return Stored(dtype, int(base * archive), archive, int(series * 6 * archive), 6 * archive)


def _rates(push: float, pull: float, identical: bool = True) -> Rates:
    return Rates(200 * MiB, push * 1000, 1000.0, pull * 2000, 2000.0, identical)


def _statuses(text: str) -> list[tuple[str, ...]]:
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [tuple(cell.strip() for cell in row) for row in rows if row[0].strip() != "store"]


def test_figures_that_meet_every_target_hold() -> None:
    stored = [_stored("fp32", 0.9, 0.5), _stored("bf16", 0.8, 0.41)]
    text, held = section(LARGE, {"local": (_rates(0.8, 0.95), stored)})
    assert held
    assert _statuses(text) == [
        ("local", "800", "1000", "0.80", "1900", "2000", "0.95", "MET"),
        ("local", "fp32 base + 5 fine-tunes", "300.0 MiB", "600.0 MiB", "0.50x", "≤ 0.50x", "MET"),
        ("local", "fp32 base alone", "90.0 MiB", "100.0 MiB", "0.90x", "—", "not judged"),
        ("local", "bf16 base + 5 fine-tunes", "246.0 MiB", "600.0 MiB", "0.41x", "≤ 0.50x", "MET"),
        ("local", "bf16 base alone", "80.0 MiB", "100.0 MiB", "0.80x", "≤ 0.80x", "MET"),
    ]
    assert "(6 layers, width 768, vocabulary 8192)" in text
    assert "first float32 fine-tune (200 MiB)" in text


@pytest.mark.parametrize(
    ("rates", "stored", "missed"),
    [
        (_rates(0.79, 1.0), [_stored("bf16", 0.7, 0.4)], "MISSED (< 0.8 of raw)"),
        (_rates(1.0, 0.5), [_stored("bf16", 0.7, 0.4)], "MISSED (< 0.8 of raw)"),
        (_rates(1.0, 1.0), [_stored("bf16", 0.7, 0.51)], "MISSED (> 0.50x)"),
        (_rates(1.0, 1.0), [_stored("fp32", 1.0, 0.6)], "MISSED (> 0.50x)"),
        (_rates(1.0, 1.0), [_stored("bf16", 0.81, 0.4)], "MISSED (> 0.80x)"),
    ],
)
def test_one_missed_target_is_shown_and_the_section_does_not_hold(
    rates: Rates, stored: list[Stored], missed: str
) -> None:
    text, held = section(LARGE, {"SeaweedFS (S3)": (rates, stored)})
    assert not held
    assert [row[-1] for row in _statuses(text)].count(missed) == 1, text


def test_a_pull_that_differs_from_its_push_fails() -> None:
    text, held = section(LARGE, {"local": (_rates(1.0, 1.0, identical=False), [])})
    assert not held
    assert _statuses(text)[0][-1] == "FAIL (a pull differs from the archive served at push)"


def test_the_rates_with_encoding_off_are_shown_beside_and_not_judged() -> None:
    rates = _rates(0.5, 0.5)
    rates.plain = _rates(0.7, 0.6)
    text, held = section(LARGE, {"local": (rates, [_stored("bf16", 0.7, 0.4)])})
    assert not held
    rows = _statuses(text)
    assert rows[0][-1] == "MISSED (< 0.8 of raw)"
    assert rows[1] == (
        "local, encoding off",
        "700",
        "1000",
        "0.70",
        "1200",
        "2000",
        "0.60",
        "not judged (reference)",
    )
    plain_only = _rates(1.0, 1.0)
    plain_only.plain = _rates(0.1, 0.1)
    assert section(LARGE, {"local": (plain_only, [_stored("bf16", 0.7, 0.4)])})[1]
