"""Our "readable by torch X" verdicts equal what each torch release really did.

tests/data/releases/ is the record of a `make releases` run: the JSON of every program each
release saved, and loads.json, every release's real `torch.export.load` + `.module()` of each.
No release venv is needed here: the verdicts are recomputed from the documents.
"""

from __future__ import annotations

from pathlib import Path

import schema
from app.releases.generate import RELEASES
from tests.releases.record import DATA, disagreements, stored, stored_verdicts

DATA_, TRUTH = stored()


def _document(writer: str, program: str) -> bytes:
    return (DATA / writer / f"{program}.json").read_bytes()


def test_the_record_covers_every_release_as_writer_and_reader() -> None:
    assert list(DATA_["torch"]) == list(RELEASES)
    assert list(TRUTH) == list(RELEASES)
    for writer, programs in TRUTH.items():
        assert programs, f"torch {writer} saved nothing"
        for program, readers in programs.items():
            assert list(readers) == list(RELEASES), (writer, program)
            # each document is what that release wrote, not a copy of another's
            written = schema.load(_document(writer, program)).torch_version
            assert written is not None
            assert written.split("+")[0] == writer
    stored_files = {p.relative_to(DATA) for p in DATA.rglob("*.json")} - {Path("loads.json")}
    assert stored_files == {Path(w) / f"{p}.json" for w, ps in TRUTH.items() for p in ps}


def test_every_verdict_is_what_the_release_really_did() -> None:
    verdicts = stored_verdicts(TRUTH)
    for key, by_release in verdicts.items():
        assert set(RELEASES) <= set(by_release), f"{key}: no verdict for some release"
    wrong = disagreements(TRUTH, verdicts)
    assert not wrong, f"{len(wrong)} verdict(s) differ from torch:\n" + "\n".join(
        d.line() for d in wrong
    )
