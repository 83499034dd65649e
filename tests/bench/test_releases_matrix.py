"""The release matrix's parts that need no release venvs: results, tables, one release's run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from bench.releases import export_programs, load_programs
from bench.releases.matrix import (
    BEGIN,
    END,
    between_markers,
    failures_by_error,
    parse_lines,
    render_table,
    replace_between_markers,
)
from bench.releases.run import RunFailed, collect, document
from bench.releases.venvs import VenvFailed, ensure, is_release
from tests.releases.record import (
    Disagreement,
    Load,
    Ours,
    disagreements,
    truth_from_json,
    truth_to_json,
)

FAILED = Load("load", "SerializeError <- SerializeError: We failed to resolve aten.qr")


def test_a_load_counts_as_loaded_unless_load_or_module_failed() -> None:
    assert Load(None, None).loads
    assert Load("run", "NotImplementedError: no CPU kernel").loads
    assert not Load("module", "KeyError: 'x'").loads
    assert not FAILED.loads


def test_loads_round_trip_through_json_and_an_inconsistent_record_is_refused() -> None:
    truth = {"2.13.0": {"linear": {"2.14.1": Load(None, None), "2.6.0": FAILED}}}
    assert truth_from_json({"loads": truth_to_json(truth)}) == truth
    with pytest.raises(ValueError, match="inconsistent"):
        Load.from_json({"loads": True, "stage": "load", "error": "TypeError: x"})


def test_a_readers_lines_parse_by_writer_and_program() -> None:
    text = (
        '{"writer": "2.9.1", "program": "cond", "stage": null, "error": null}\n\n'
        '{"writer": "2.15.0", "program": "linear", "stage": "load", "error": "TypeError: k"}\n'
    )
    assert parse_lines(text) == {
        ("2.9.1", "cond"): Load(None, None),
        ("2.15.0", "linear"): Load("load", "TypeError: k"),
    }


def test_the_table_marks_exactly_the_pairs_our_verdict_got_wrong() -> None:
    truth = {
        "2.13.0": {"qr_cholesky": {"2.13.0": Load(None, None), "2.14.1": FAILED}},
        "2.15.0": {"linear": {"2.13.0": Load(None, None), "2.14.1": Load(None, None)}},
    }
    ours = {
        ("2.13.0", "qr_cholesky"): {"2.13.0": Ours(True, ""), "2.14.1": Ours(True, "")},
        ("2.15.0", "linear"): {"2.13.0": Ours(True, ""), "2.14.1": Ours(True, "Node.name")},
    }
    found = disagreements(truth, ours)
    assert found == [Disagreement("2.13.0", "qr_cholesky", "2.14.1", FAILED, Ours(True, ""))]
    assert "read by 2.14.1: fails (load: SerializeError" in found[0].line()
    table = render_table(truth, ["2.13.0", "2.14.1"], found).splitlines()
    assert table[0] == "| written by | program | 2.13.0 | 2.14.1 |"
    assert table[2] == "| 2.13.0 | `qr_cholesky` | loads | fails ≠ |"
    assert table[3] == "| 2.15.0 | `linear` | loads | loads |"
    assert failures_by_error(truth) == [
        f"- load: `{FAILED.error}` (1): 2.13.0 `qr_cholesky` -> 2.14.1"
    ]


def test_the_block_between_the_markers_is_replaced_and_the_rest_kept() -> None:
    text = f"# t\n\nbefore\n\n{BEGIN}\nold\n{END}\n\nafter\n"
    replaced = replace_between_markers(text, "| a |\n")
    assert replaced == f"# t\n\nbefore\n\n{BEGIN}\n| a |\n{END}\n\nafter\n"
    assert between_markers(replaced) == "\n| a |\n"
    with pytest.raises(ValueError, match="markers"):
        replace_between_markers("no markers", "x")


def test_a_reader_that_did_not_report_a_saved_program_fails_the_run() -> None:
    manifests = {"2.9.1": {"programs": {"cond": {"status": "saved"}, "qr": {"status": "skipped"}}}}
    assert collect(manifests, {"2.9.1": {("2.9.1", "cond"): Load(None, None)}}) == {
        "2.9.1": {"cond": {"2.9.1": Load(None, None)}}
    }
    with pytest.raises(RunFailed, match="did not report"):
        collect(manifests, {"2.9.1": {}})


def test_release_names_match_torchs_version_strings() -> None:
    assert is_release("2.14.1+cu130", "2.14.1")
    assert is_release("2.13.0", "2.13.0")
    assert not is_release("2.14.10+cu130", "2.14.1")
    assert not is_release(None, "2.14.1")


def test_the_root_cause_is_what_a_failed_load_records() -> None:
    node = "Failed deserializing node Node(target='torch.ops.aten.qr.default', inputs=[...])"
    wrapped = RuntimeError(node)
    wrapped.__cause__ = AttributeError("no qr\nmore")
    assert load_programs.describe(wrapped) == (
        "RuntimeError: Failed deserializing node torch.ops.aten.qr.default <- AttributeError: no qr"
    )
    inline = RuntimeError("Failed\n Original exception Traceback:\n  ...\nAssertionError: arg ")
    assert load_programs.describe(inline) == "RuntimeError: Failed <- AssertionError: arg"
    assert load_programs.describe(KeyError("w")) == "KeyError: 'w'"


def test_one_release_exports_what_it_has_and_its_own_torch_loads_it(tmp_path: Path) -> None:
    # the pinned torch is one release of the matrix: it has aten.qr and lacks aten.linalg_polar
    by_name = {p.name: p for p in export_programs.PROGRAMS}
    writer = tmp_path / "2.13.0"
    writer.mkdir()
    assert torch.__version__.startswith("2.13")
    assert export_programs.export_one(by_name["qr_cholesky"], writer)["status"] == "saved"
    skipped = export_programs.export_one(by_name["linalg_polar"], writer)
    assert skipped["status"] == "skipped"
    assert "aten::linalg_polar.default" in skipped["detail"]
    assert not (writer / "linalg_polar.pt2").exists()
    manifest = {"programs": {"qr_cholesky": {"status": "saved"}, "linalg_polar": skipped}}
    (writer / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "loads.jsonl"
    assert load_programs.main([str(out), str(tmp_path), "2.13.0"]) == 0
    assert parse_lines(out.read_text()) == {("2.13.0", "qr_cholesky"): Load(None, None)}
    assert b'"torch.ops.aten.qr.default"' in document(writer / "qr_cholesky.pt2")


def test_an_existing_venv_of_the_release_is_used_and_the_pinned_one_is_this_venv(
    tmp_path: Path,
) -> None:
    # this interpreter runs torch 2.13.0: as v2.13.0 it is that release's venv, made by nobody
    (tmp_path / "v2.13.0" / "bin").mkdir(parents=True)
    wrapper = tmp_path / "v2.13.0" / "bin" / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    python, reported = ensure("2.13.0", tmp_path)
    assert python == tmp_path / "v2.13.0" / "bin" / "python"
    assert is_release(reported, "2.13.0")
    python, reported = ensure("2.13.0", tmp_path / "elsewhere")
    assert python == Path(sys.executable)
    assert is_release(reported, "2.13.0")
    assert not (tmp_path / "elsewhere").exists()


def test_a_venv_that_cannot_be_made_is_one_error_naming_it(tmp_path: Path) -> None:
    # a directory where the venv's pip should be is not a venv: creation or install fails
    (tmp_path / "v2.14.1" / "bin" / "python").mkdir(parents=True)
    with pytest.raises(VenvFailed, match="pip"):
        ensure("2.14.1", tmp_path)
