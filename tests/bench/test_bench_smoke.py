"""The benchmark harness runs end to end on the smallest program (no timing asserts)."""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import schema
from bench.cases import Measured
from bench.hf_programs import hf_program
from bench.measure import CheckFailed, Timing, timed
from bench.programs import Cache, decoder_inputs, decoder_program, tiled_program
from bench.report import kept_sections, timing_row
from tests.hf_models import MODELS

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_BENCHES = (
    "parse + validate",
    "dump",
    "canonicalize",
    "semantic validation",
    ".pt2 -> loadable .pt2",
)


def _table(stdout: str) -> list[dict[str, str]]:
    # the benchmarks' table (the mixed-load and storage sections print tables of their own)
    text = stdout.splitlines()
    first = next(i for i, line in enumerate(text) if line.startswith("| benchmark |"))
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), text[first:]))
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")), strict=True))
        for line in lines[2:]
    ]


@pytest.fixture(scope="module")
def smoke_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`python -m bench --smoke` once, with its cache and results in a temporary directory."""
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "RESULTS.md"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--cache-dir",
            str(tmp / "cache"),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return result, out


def test_smoke_run_prints_a_table_where_every_check_passed(
    smoke_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = smoke_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = _table(result.stdout)
    assert "FAIL" not in result.stdout
    benches = [row["benchmark"] for row in rows]
    for name in LIBRARY_BENCHES:
        assert sum(b.startswith(name) for b in benches) == 1, (name, benches)
    assert sum(b.startswith("archive read + weights sha256") for b in benches) == 2
    assert sum(b.startswith("schema diff") for b in benches) == 2
    assert sum(b.startswith("HTTP POST /v1/validate") for b in benches) == 2
    assert sum(b.startswith("HTTP POST /v1/canonicalize") for b in benches) == 2
    library = [r for r in rows if not r["benchmark"].startswith("HTTP")]
    # torch has no schema diff: its rows are checked against the release files' own changes
    checked = {r["checked against"] for r in library if not r["benchmark"].startswith("schema")}
    assert checked == {"torch"}
    diffs = [r for r in library if r["benchmark"].startswith("schema diff")]
    assert {r["checked against"] for r in diffs} == {"the release files (changes read off them)"}
    assert all(r["status"].startswith(("MET", "MISSED", "not judged")) for r in library), rows
    assert all(any(ch.isdigit() for ch in r["ours best / median"]) for r in rows)
    assert all(r["ours/floor"] != "—" for r in rows if r["benchmark"].startswith("HTTP"))
    assert "[bench" in result.stderr
    written = out.read_text()
    assert "| benchmark |" in written
    assert "**CPU**" in written
    assert "torch 2." in written
    # the server's idle footprint, by process role, with its verdict
    assert "## Idle footprint" in written
    assert re.search(r"\*\*idle footprint\*\*: [\d,]+ MB RSS in all .*: (MET|MISSED)", written)
    # the registry storage section on the fine-tune series, each store's rows with a verdict
    for store in ("local", "SeaweedFS (S3)"):
        for what in ("bf16 base + 5 fine-tunes", "bf16 base alone", "fp32 base + 5 fine-tunes"):
            assert re.search(
                rf"\| {re.escape(store)} \| {re.escape(what)} \| .* \| (MET|MISSED)", written
            )


def test_a_failed_check_stops_the_runs_and_prints_fail() -> None:
    calls: list[int] = []

    def run() -> int:
        calls.append(1)
        return len(calls)

    def check(value: int) -> None:
        raise CheckFailed(f"got {value}")

    with pytest.raises(CheckFailed, match="got 1"):
        timed(run, repeats=5, check=check)
    assert calls == [1]
    row = timing_row("parse", "p", 10, 100, [("", Measured(failure="differs from torch's"))])
    assert (row.ours, row.vs_torch, row.vs_floor, row.status) == ("FAIL",) * 4
    assert row.notes == ["p parse: FAIL differs from torch's"]


def test_rows_judge_the_targets() -> None:
    fast = Timing(0.01, 0.01, 3, None)
    slow = Timing(0.15, 0.2, 3, None)
    floor = Timing(0.001, 0.001, 3, None)
    met = timing_row(
        "parse",
        "p",
        1000,
        100,
        [
            (
                "",
                Measured(
                    ours=fast, torch=Timing(0.3, 0.3, 1, None), floor=Timing(0.004, 0.004, 3, None)
                ),
            )
        ],
    )
    slow_run = [("", Measured(ours=fast, torch=slow, floor=floor))]
    missed = timing_row("parse", "p", 1000, 100, slow_run)
    small = timing_row("parse", "p", 499, 100, slow_run)
    assert met.status == "MET"
    assert missed.status == "MISSED (15x < 20x torch; 10x > 5x floor)"
    # parse, dump and canonicalize are judged from about 1k nodes; smaller rows keep a verdict
    assert small.status == "not judged (< 500 nodes; MISSED (15x < 20x torch; 10x > 5x floor))"


def test_tiled_programs_load_and_run_in_torch(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    base = decoder_program(cache, 3)
    tiled = tiled_program(cache, base, 6)
    per_block = (tiled.nodes - base.nodes) // 3
    assert per_block > 40
    assert tiled.nodes == base.nodes + 3 * per_block
    doc: schema.ExportedProgram = schema.load(tiled.document)
    fqns = [
        s.parameter.parameter_name
        for s in doc.graph_module.signature.input_specs
        if isinstance(s, schema.InputSpecParameter)
    ]
    assert [f for f in fqns if f.endswith("qkv.weight")] == [
        f"blocks.{k}.qkv.weight" for k in range(6)
    ]
    program = torch.export.load(io.BytesIO(tiled.archive_bytes))
    args, _ = decoder_inputs()
    out = program.module()(*args)
    assert out.shape == args[0].shape
    assert torch.isfinite(out).all()


def test_rows_give_the_cost_per_megabyte() -> None:
    ours = Timing(0.02, 0.02, 3, None)
    row = timing_row("parse", "p", 10, 4_000_000, [("", Measured(ours=ours))])
    assert row.per_mb == "5"


def test_hugging_face_programs_are_torch_exports_that_load_and_run(tmp_path: Path) -> None:
    model = dataclasses.replace(next(m for m in MODELS if m.name == "vit"), layers=1)
    program = hf_program(Cache(tmp_path), model)
    assert program.name.startswith("vit-")
    assert program.nodes > 20
    doc = schema.load(program.document)
    assert schema.dump(doc) == doc.__pydantic_serializer__.to_json(doc)
    program.setup()
    loaded = torch.export.load(io.BytesIO(program.archive_bytes))
    args, kwargs = program.inputs()
    out = loaded.module()(*args, **kwargs)
    assert out.last_hidden_state.shape == (2, 5, 32)


def test_a_new_results_file_keeps_the_sections_tests_measure() -> None:
    previous = "# old\n\n| table |\n\n## Web UI: graph\n\nfigures\n"
    assert kept_sections(previous) == "## Web UI: graph\n\nfigures\n"
    assert kept_sections("# old\n\n| table |\n") == ""
