"""bench/RELEASES.md and docs/schema.md show the recorded loads of tests/data/releases, with our
verdicts on them, as `python -m bench.releases --render` writes them."""

from __future__ import annotations

from bench.releases.matrix import between_markers
from bench.releases.run import RESULTS, SCHEMA_DOC, table_block
from tests.releases.record import stored, stored_verdicts

DATA_, TRUTH = stored()


def test_the_docs_and_releases_md_show_the_recorded_loads() -> None:
    verdicts = stored_verdicts(TRUTH)
    block = between_markers(RESULTS.read_text())
    assert block.strip() == table_block(DATA_, TRUTH, verdicts).strip(), (
        "bench/RELEASES.md is stale: python -m bench.releases --render"
    )
    assert between_markers(SCHEMA_DOC.read_text()) == block, (
        "docs/schema.md's table is not RELEASES.md's"
    )
