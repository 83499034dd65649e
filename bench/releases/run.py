"""`make releases`: which torch release loads which program, by real loads, against our verdicts.

Each release's venv exports the programs of export_programs.py; each release's venv then loads
every saved program (load_programs.py, one process per reader). The real loads are the ground
truth; pt2serde's verdict on each document (`app.releases.verdicts`) is compared with them. The
documents and the truth go to tests/data/releases/ (tests/releases/ pins them without venvs), the
table to bench/RELEASES.md and docs/schema.md's "Which torch reads what".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import textwrap
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.releases.generate import RELEASES
from bench.progress import progress
from bench.releases.matrix import (
    BEGIN,
    END,
    between_markers,
    failures_by_error,
    parse_lines,
    render_table,
    replace_between_markers,
)
from bench.releases.venvs import ensure
from tests.releases.record import (
    DATA,
    Load,
    Ours,
    Truth,
    disagreements,
    stored,
    stored_verdicts,
    truth_to_json,
)

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = ROOT / "bench" / "RELEASES.md"
SCHEMA_DOC = ROOT / "docs" / "schema.md"
EXPORT_TIMEOUT = 900
LOAD_TIMEOUT = 1200
HOW = (
    "make releases (python -m bench.releases): each release's venv saved the programs of "
    "bench/releases/export_programs.py with torch.export.save; each release's venv then ran "
    "torch.export.load, .module() and a call on the sample inputs of every saved program "
    "(bench/releases/load_programs.py). loads: load and .module() succeeded."
)


class RunFailed(RuntimeError):
    """A step of the matrix did not finish (a timeout, a crashed process, a missing result)."""


def _script_digest() -> str:
    return hashlib.sha256((HERE / "export_programs.py").read_bytes()).hexdigest()


def _subprocess(command: list[str], timeout: int, log: Path, what: str) -> None:
    with log.open("w") as out:
        try:
            done = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise RunFailed(f"{what} timed out after {timeout} s (log: {log})") from exc
    if done.returncode != 0:
        raise RunFailed(f"{what} exited {done.returncode} (log: {log})")


def export(release: str, python: Path, reported: str, workdir: Path, reuse: bool) -> None:
    """Have `release` save every program it has into workdir/<release>/."""
    out = workdir / release
    manifest = out / "manifest.json"
    if reuse and manifest.exists():
        kept = json.loads(manifest.read_text())
        if kept["torch"] == reported and kept["script"] == _script_digest():
            progress(f"torch {release}: reusing its exports in {out}")
            return
    shutil.rmtree(out, ignore_errors=True)
    progress(f"torch {release}: exporting")
    started = time.perf_counter()
    command = [str(python), "-I", str(HERE / "export_programs.py"), str(out)]
    _subprocess(command, EXPORT_TIMEOUT, workdir / f"export-{release}.log", f"export by {release}")
    progress(f"torch {release}: exported in {time.perf_counter() - started:.0f} s")


def load_all(
    reader: str, python: Path, workdir: Path, writers: list[str]
) -> dict[tuple[str, str], Load]:
    """Every saved program, as `reader`'s torch.export.load meets it."""
    out = workdir / f"loads-{reader}.jsonl"
    progress(f"torch {reader}: loading every saved program")
    started = time.perf_counter()
    command = [str(python), "-I", str(HERE / "load_programs.py"), str(out), str(workdir), *writers]
    _subprocess(command, LOAD_TIMEOUT, workdir / f"load-{reader}.log", f"loads by {reader}")
    progress(f"torch {reader}: loaded in {time.perf_counter() - started:.0f} s")
    return parse_lines(out.read_text())


def document(archive: Path) -> bytes:
    """The program's JSON inside a .pt2 (`models/model.json`)."""
    with zipfile.ZipFile(archive) as zipped:
        for name in zipped.namelist():
            if name.endswith(("/models/model.json", "serialized_exported_program.json")):
                return zipped.read(name)
    raise RunFailed(f"{archive} has no program JSON")


def _manifests(workdir: Path, releases: list[str]) -> dict[str, dict[str, Any]]:
    return {r: json.loads((workdir / r / "manifest.json").read_text()) for r in releases}


def _saved(manifest: dict[str, Any]) -> list[str]:
    return [p for p, entry in manifest["programs"].items() if entry["status"] == "saved"]


def collect(
    manifests: dict[str, dict[str, Any]], found: dict[str, dict[tuple[str, str], Load]]
) -> Truth:
    """The ground truth, in release then program order; every saved program must have a load."""
    truth: Truth = {}
    for writer, manifest in manifests.items():
        truth[writer] = {}
        for program in _saved(manifest):
            cells = {}
            for reader, loads in found.items():
                if (writer, program) not in loads:
                    raise RunFailed(f"torch {reader} did not report on {writer}'s {program}")
                cells[reader] = loads[writer, program]
            truth[writer][program] = cells
    return truth


def store(
    truth: Truth, manifests: dict[str, dict[str, Any]], workdir: Path, runtime: float
) -> None:
    """Write the documents and loads.json under tests/data/releases (replacing what was there)."""
    shutil.rmtree(DATA, ignore_errors=True)
    for writer, programs in truth.items():
        (DATA / writer).mkdir(parents=True)
        for program in programs:
            (DATA / writer / f"{program}.json").write_bytes(
                document(workdir / writer / f"{program}.pt2")
            )
    data = {
        "made": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "how": HOW,
        "runtime_seconds": round(runtime),
        "torch": {release: manifest["torch"] for release, manifest in manifests.items()},
        "not_exported": {
            release: {
                program: f"{entry['status']}: {entry['detail']}"
                for program, entry in manifest["programs"].items()
                if entry["status"] != "saved"
            }
            for release, manifest in manifests.items()
        },
        "loads": truth_to_json(truth),
    }
    (DATA / "loads.json").write_text(json.dumps(data, indent=1) + "\n")


def table_block(data: dict[str, Any], truth: Truth, verdicts: dict[Any, dict[str, Ours]]) -> str:
    """What goes between the markers, in RELEASES.md and docs/schema.md alike."""
    disagree = disagreements(truth, verdicts)
    readers = list(data["torch"])
    checked = (
        f"`≠`: pt2serde's verdict (`app.releases.verdicts`) says otherwise "
        f"({len(disagree)} of {sum(len(p) * len(readers) for p in truth.values())} pairs)."
    )
    intro = (
        f"Real loads from `make releases` on {data['made']} (torch "
        + ", ".join(data["torch"].values())
        + "). Rows: the release that saved the program; columns: the release that loads it. "
        "loads: `torch.export.load` and `.module()` succeed; fails: one of them raises. " + checked
    )
    return textwrap.fill(intro, 100) + "\n\n" + render_table(truth, readers, disagree)


def results_text(data: dict[str, Any], truth: Truth, verdicts: dict[Any, dict[str, Ours]]) -> str:
    """bench/RELEASES.md."""
    disagree = disagreements(truth, verdicts)
    minutes = data["runtime_seconds"] / 60
    parts = [
        "# Which torch reads what (`make releases`)",
        textwrap.fill(
            f"{data['how']} The whole run took {minutes:.1f} min on the machine that made it.", 100
        ),
        f"{BEGIN}\n{table_block(data, truth, verdicts)}\n{END}",
        "## Where our verdict and the real load disagree",
        "\n".join(d.line() for d in disagree) if disagree else "None.",
        "## Failures, by error",
        "A `run` failure is a program that loaded but does not run on this CPU (it counts as "
        "loads).",
        "\n".join(failures_by_error(truth)) or "None.",
        "## Programs a release did not export",
        "\n".join(
            f"- {release} `{program}`: {why}"
            for release, programs in data["not_exported"].items()
            for program, why in programs.items()
        )
        or "None.",
    ]
    return "\n\n".join(parts) + "\n"


def publish() -> int:
    """Write RELEASES.md and docs/schema.md's table from the record; the disagreements found."""
    data, truth = stored()
    verdicts = stored_verdicts(truth)
    RESULTS.write_text(results_text(data, truth, verdicts))
    SCHEMA_DOC.write_text(
        replace_between_markers(SCHEMA_DOC.read_text(), table_block(data, truth, verdicts))
    )
    print(between_markers(RESULTS.read_text()))
    return len(disagreements(truth, verdicts))


def main(argv: list[str] | None = None) -> int:
    """Run the matrix (or, with --render, only re-render from the stored results)."""
    parser = argparse.ArgumentParser(prog="python -m bench.releases", description=__doc__)
    parser.add_argument(
        "--releases-dir", type=Path, default=Path.home() / ".cache/pt2serde/releases"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/pt2serde-releases"))
    parser.add_argument("--reuse", action="store_true", help="keep exports made by the same script")
    parser.add_argument("--jobs", type=int, default=1, help="releases exporting/loading at once")
    parser.add_argument(
        "--render", action="store_true", help="only re-render from tests/data/releases"
    )
    args = parser.parse_args(argv)
    if args.render:
        return 1 if publish() else 0
    started = time.perf_counter()
    pythons = {release: ensure(release, args.releases_dir) for release in RELEASES}
    args.workdir.mkdir(parents=True, exist_ok=True)
    releases = list(RELEASES)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        exported = [
            pool.submit(export, r, pythons[r][0], pythons[r][1], args.workdir, args.reuse)
            for r in releases
        ]
        for future in exported:
            future.result()
        loading = {
            r: pool.submit(load_all, r, pythons[r][0], args.workdir, releases) for r in releases
        }
        found = {r: future.result() for r, future in loading.items()}
    manifests = _manifests(args.workdir, releases)
    truth = collect(manifests, found)
    store(truth, manifests, args.workdir, time.perf_counter() - started)
    disagreeing = publish()
    progress(f"done in {time.perf_counter() - started:.0f} s; {disagreeing} disagreement(s)")
    return 1 if disagreeing else 0
