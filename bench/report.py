"""The results table: rows, figures, targets (MET / MISSED), the machine, and RESULTS.md."""

from __future__ import annotations

import datetime
import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from bench.cases import Measured, mb_per_s, per_node
from bench.measure import Timing, total
from bench.service import Load


@dataclass(frozen=True)
class Target:
    """What one benchmark must reach: against torch, against the floor, or a bound of its own."""

    text: str
    #: ours at least this many times faster than torch.
    vs_torch: float | None = None
    #: ours at most this many times the floor's time.
    vs_floor: float | None = None
    #: ours at least this fraction of the floor's throughput.
    fraction: float | None = None
    #: rows of fewer nodes show their verdict but are not judged (parse, dump and canonicalize
    #: are judged on the programs of about 1k nodes and more, not on the zoo's small ones or
    #: decoder-107).
    min_nodes: int = 0
    #: ours' best time at most this many seconds (a bound of its own: no torch counterpart).
    within: float | None = None


TARGETS = {
    "parse": Target("≥20x torch, ≤5x orjson.loads", vs_torch=20, vs_floor=5, min_nodes=500),
    "dump": Target("≥8x torch, ≤3x orjson.dumps", vs_torch=8, vs_floor=3, min_nodes=500),
    "canonicalize": Target("≥10x torch", vs_torch=10, min_nodes=500),
    "validate": Target("≥10x torch.export.load", vs_torch=10),
    "deserialize": Target("≥1.5x torch load + save", vs_torch=1.5),
    "hash": Target("≥80% of sha256, memory flat", fraction=0.8),
    # once a timed test (tests/schema/test_diff.py); speed targets live in the bench
    "diff": Target("≤50 ms", within=0.05),
    "http": Target("≥80% of the library loop", fraction=0.8),
    # the torch path (bench.torchpath): whole processes, and the warm service
    "validate-torch": Target("≤ torch's process time (≥1x)", vs_torch=1),
    "deserialize-cli": Target("≤ torch's process time (≥1x)", vs_torch=1),
    "deserialize-http": Target("≥1.5x torch load + save in process", vs_torch=1.5),
}

#: Each library benchmark: what runs on our side, on torch's, and as the floor.
LABELS = {
    "parse": "parse + validate: schema.load vs torch _bytes_to_dataclass; floor orjson.loads",
    "dump": "dump: schema.dump vs torch _to_json_bytes; floor orjson.dumps",
    "canonicalize": "canonicalize + canonical bytes + digests vs torch canonicalize + encoder",
    "validate": "semantic validation of the .pt2 (operations.check) vs torch.export.load",
    "deserialize": ".pt2 -> loadable .pt2 (bridge fast route + pt2 write) vs torch load + save",
    "diff": "schema diff: schema.diff of two schema versions",
    "validate-torch": "CLI process `pt2serde validate --level torch` vs a torch.export.load "
    "process",
    "deserialize-cli": "CLI process `pt2serde deserialize` (.pt2 -> loadable .pt2) vs a torch "
    "load + save process",
    "deserialize-http": "HTTP POST /v1/deserialize, warm server (upload, build, download) vs "
    "torch load + save in process",
}

COLUMNS = (
    "benchmark",
    "program",
    "nodes",
    "input",
    "ours best / median",
    "torch best / median",
    "floor best / median",
    "ours/torch",
    "ours/floor",
    "ours µs/node",
    "ours ms/MB",
    "peak RSS growth ours / torch / floor",
    "checked against",
    "target",
    "status",
)


@dataclass
class Row:
    """One line of the table, already formatted."""

    bench: str
    program: str
    nodes: str
    input: str
    #: which benchmark ("parse", ..., "hash", "http"), for ordering.
    kind: str = ""
    ours: str = "—"
    torch: str = "—"
    floor: str = "—"
    vs_torch: str = "—"
    vs_floor: str = "—"
    per_node: str = "—"
    #: ours' best time per MB of input: real documents carry more metadata per node.
    per_mb: str = "—"
    rss: str = "—"
    checked: str = "—"
    target: str = ""
    status: str = ""
    notes: list[str] = field(default_factory=list)

    def cells(self) -> list[str]:
        """The row's cells in column order."""
        return [
            self.bench,
            self.program,
            self.nodes,
            self.input,
            self.ours,
            self.torch,
            self.floor,
            self.vs_torch,
            self.vs_floor,
            self.per_node,
            self.per_mb,
            self.rss,
            self.checked,
            self.target,
            self.status,
        ]


# ---------------------------------------------------------------- figures


def seconds(value: float) -> str:
    """A duration, in a readable unit."""
    if math.isnan(value):
        return "—"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.2f} s"


def megabytes(value: int | None) -> str:
    """A byte count in MB (10^6)."""
    if value is None:
        return "n/a"
    return f"{value / 1e6:.1f} MB" if value >= 1e5 else f"{value / 1e3:.0f} KB"


def pair(t: Timing | None) -> str:
    """best / median ×runs."""
    if t is None:
        return "—"
    return f"{seconds(t.best)} / {seconds(t.median)} ×{t.runs}"


def _speedup(ratio: float) -> str:
    if ratio <= 1:
        return f"{ratio:.3g} ({1 / ratio:.1f}x faster)"
    return f"{ratio:.3g} ({ratio:.1f}x slower)"


# ---------------------------------------------------------------- library rows


def timing_row(
    bench: str,
    program: str,
    nodes: int,
    input_bytes: int,
    measured: list[tuple[str, Measured]],
) -> Row:
    """The row of one program (or the zoo's sum) for a library benchmark."""
    row = Row(LABELS[bench], program, f"{nodes:,}", megabytes(input_bytes), bench)
    failures = [(name, m.failure) for name, m in measured if m.failure]
    included = [(name, m) for name, m in measured if m.excluded is None and not m.failure]
    excluded = [(name, m.excluded) for name, m in measured if m.excluded is not None]
    row.notes += [f"{program} {bench}: {_named(name)}{why}" for name, why in excluded]
    row.target = TARGETS[bench].text
    if failures:
        row.ours = row.vs_torch = row.vs_floor = row.status = "FAIL"
        row.notes += [f"{program} {bench}: FAIL {_named(name)}{why}" for name, why in failures]
        return row
    if not included:
        row.ours = "not run"
        return row
    ours = total([m.ours for _, m in included if m.ours is not None])
    row.ours = pair(ours)
    row.per_node = f"{per_node(ours.best, nodes):.1f}"
    row.per_mb = f"{ours.best * 1e3 / (input_bytes / 1e6):.3g}" if input_bytes else "—"
    torch_runs = [m.torch for _, m in included if m.torch is not None]
    torch_t = total(torch_runs) if len(torch_runs) == len(included) else None
    floors = [m.floor for _, m in included if m.floor is not None]
    floor_t = total(floors) if floors and len(floors) == len(included) else None
    checked = sorted({m.checked for _, m in included})
    row.checked = ", ".join(checked)
    target = TARGETS[bench]
    verdicts: list[str] = []
    estimated = False
    if torch_t is not None:
        row.torch = pair(torch_t)
        speedup = torch_t.best / ours.best
        row.vs_torch = _speedup(ours.best / torch_t.best)
    else:
        estimates = [m.torch_estimate for _, m in included]
        estimate = math.fsum(e for e in estimates if e is not None)
        notes = {m.torch_note for _, m in included if m.torch_note}
        row.torch = "not run" + (f" (est. {seconds(estimate)})" if estimate > 0 else "")
        row.notes += [f"{program} {bench}: torch {note}" for note in sorted(notes)]
        speedup = estimate / ours.best if estimate > 0 else math.nan
        estimated = True
        if not math.isnan(speedup):
            row.vs_torch = f"~{_speedup(ours.best / estimate)} est."
    if target.vs_torch is not None and not math.isnan(speedup):
        verdicts.append(
            "" if speedup >= target.vs_torch else f"{speedup:.3g}x < {target.vs_torch:g}x torch"
        )
    if floor_t is not None:
        row.floor = f"{pair(floor_t)}"
        over = ours.best / floor_t.best
        row.vs_floor = f"{over:.2f}x"
        if target.vs_floor is not None:
            verdicts.append(
                "" if over <= target.vs_floor else f"{over:.3g}x > {target.vs_floor:g}x floor"
            )
    row.rss = " / ".join(
        megabytes(t.peak) if t is not None else "—" for t in (ours, torch_t, floor_t)
    )
    row.status = _status(verdicts, estimated)
    if nodes < target.min_nodes:
        row.status = f"not judged (< {target.min_nodes:,} nodes; {row.status})"
    return row


def _named(name: str) -> str:
    return f"{name}: " if name else ""


def _status(verdicts: list[str], estimated: bool) -> str:
    if not verdicts:
        return "n/a"
    missed = [v for v in verdicts if v]
    word = f"MISSED ({'; '.join(missed)})" if missed else "MET"
    return f"{word} (est.)" if estimated else word


def hash_rows(measured: list[tuple[str, int, Measured]]) -> list[Row]:
    """Weights hashing rows; memory is judged flat when it does not grow with the archive."""
    rows: list[Row] = []
    peaks = [m.ours.peak for _, _, m in measured if m.ours is not None and m.ours.peak is not None]
    flat = len(peaks) == len(measured) and max(peaks) - min(peaks) <= 16 * 1024 * 1024
    for program, size, m in measured:
        row = Row("archive read + weights sha256: manifest", program, "—", megabytes(size), "hash")
        row.target = TARGETS["hash"].text
        if m.failure or m.ours is None or m.floor is None:
            row.ours = row.vs_floor = row.status = "FAIL"
            row.notes.append(f"{program} hash: FAIL {m.failure}")
            rows.append(row)
            continue
        ours_rate, floor_rate = mb_per_s(size, m.ours.best), mb_per_s(size, m.floor.best)
        row.ours = f"{pair(m.ours)} = {ours_rate:.0f} MB/s"
        row.floor = f"sha256 of the file: {pair(m.floor)} = {floor_rate:.0f} MB/s"
        fraction = ours_rate / floor_rate
        row.vs_floor = f"{fraction:.2f} of sha256's MB/s"
        row.rss = f"{megabytes(m.ours.peak)} / — / {megabytes(m.floor.peak)}"
        row.checked = m.checked
        verdicts = ["" if fraction >= 0.8 else f"{fraction:.2f} < 0.80 of sha256"]
        verdicts.append("" if flat else "memory grows with the archive")
        row.status = _status(verdicts, False)
        rows.append(row)
    return rows


def diff_rows(measured: list[tuple[str, int, Measured]]) -> list[Row]:
    """Schema diff rows: ours' best time against a bound (torch has no schema diff)."""
    rows: list[Row] = []
    target = TARGETS["diff"]
    bound = target.within or math.inf
    for label, size, m in measured:
        row = Row(LABELS["diff"], label, "—", megabytes(size), "diff")
        row.target = target.text
        if m.failure or m.ours is None:
            row.ours = row.status = "FAIL"
            row.notes.append(f"{label} diff: FAIL {m.failure}")
        else:
            row.ours = pair(m.ours)
            row.rss = f"{megabytes(m.ours.peak)} / — / —"
            row.checked = m.checked
            best = m.ours.best
            row.status = _status(
                ["" if best <= bound else f"{seconds(best)} > {target.text}"], False
            )
        rows.append(row)
    return rows


# ---------------------------------------------------------------- the table and the file


def table(rows: list[Row]) -> str:
    """The markdown table."""
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> list[tuple[str, str]]:
    """The machine and versions, as (label, value) pairs."""
    import fastapi
    import orjson
    import pydantic
    import pydantic_core
    import torch
    import uvicorn

    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        ("CPU", f"{model}, nproc {cpus}"),
        ("RAM", memory),
        ("OS", f"{platform.system()} {platform.release()}"),
        (
            "versions",
            f"Python {platform.python_version()}, torch {torch.__version__}, "
            f"pydantic {pydantic.VERSION} (core {pydantic_core.__version__}), "
            f"orjson {orjson.__version__}, fastapi {fastapi.__version__}, "
            f"uvicorn {uvicorn.__version__}",
        ),
    ]


def load_average() -> str:
    """The 1/5/15-minute load averages (other processes share the CPUs)."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


#: RESULTS.md sections that tests measure and write (not `make bench`): a new run keeps them.
KEPT_SECTIONS = ("## Web UI",)


def kept_sections(previous: str) -> str:
    """The sections of a previous RESULTS.md that `make bench` does not measure, from the first
    such heading to the end (the tests that measure them append there)."""
    starts = [previous.find(f"\n{heading}") for heading in KEPT_SECTIONS]
    found = [i for i in starts if i >= 0]
    return previous[min(found) + 1 :] if found else ""


def replace_section(document: str, heading: str, section: str) -> str:
    """`document` (RESULTS.md) with its section under `heading` replaced by `section` (or
    `section` put before the sections that tests keep, or at the end): a section rerun alone
    (`python -m bench --only ...`) leaves every other one as it was."""
    start = f"\n{document}".find(f"\n{heading}\n")
    if start >= 0:
        following = document.find("\n## ", start)
        if following < 0:
            return document[:start] + section
        # the blank line that parts it from the next section stays
        return document[:start] + section + document[following:]
    kept = [document.find(f"\n{h}") for h in KEPT_SECTIONS]
    found = [i for i in kept if i >= 0]
    at = min(found) + 1 if found else len(document)
    return document[:at] + section + ("\n" if found else "") + document[at:]


def _now() -> str:
    """This minute, as RESULTS.md names when it was written."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def rerun_stamp(only: str) -> str:
    """The line ending a section rerun alone: when, and that the rest is the file's own run."""
    return (
        f"_This section was rerun alone (`python -m bench --only {only}`) on {_now()}; the "
        "rest of the file is the run named at its top._\n"
    )


def document(
    rows: list[Row], facts: list[tuple[str, str]], notes: list[str], legend: list[str]
) -> str:
    """RESULTS.md: machine and run facts, the table, notes, how to read it."""
    out = [
        "# pt2serde benchmarks against torch's own serde",
        "",
        f"Written by `make bench` (`python -m bench`) on {_now()}.",
        "",
        *[f"- **{label}**: {value}" for label, value in facts],
        "",
        table(rows),
        "",
    ]
    all_notes = [n for row in rows for n in row.notes] + notes
    if all_notes:
        out += ["## Notes", "", *[f"- {n}" for n in all_notes], ""]
    out += ["## How to read it", "", *[f"- {line}" for line in legend], ""]
    return "\n".join(out)


def http_row(
    endpoint: str,
    program: str,
    nodes: int,
    body: int,
    clients: int,
    server: Load | None,
    library: Load | None,
    *,
    failure: str | None = None,
    judged: bool = False,
) -> Row:
    """One HTTP load figure against the library loop with as many processes as clients."""
    row = Row(
        f"HTTP POST {endpoint}, {clients} client{'s' if clients > 1 else ''}",
        program,
        f"{nodes:,}",
        megabytes(body) + " JSON",
        "http",
    )
    row.checked = "library output for the same bytes"
    if judged:
        row.target = TARGETS["http"].text
    errors = (server.errors if server else []) + (library.errors if library else [])
    if failure or errors or server is None or library is None:
        row.ours = row.vs_floor = row.status = "FAIL"
        row.notes.append(f"{row.bench} on {program}: FAIL {failure or errors[:2]}")
        return row
    row.ours = _load_text(server, "")
    row.floor = _load_text(library, f"library × {clients} proc: ")
    fraction = server.rate / library.rate
    row.vs_floor = f"{fraction:.2f} of the library's req/s"
    row.rss = f"server {megabytes(server.peak)} / — / per process +{megabytes(library.peak)}"
    if judged:
        row.status = _status(["" if fraction >= 0.8 else f"{fraction:.2f} < 0.80"], False)
    return row


def _load_text(load: Load, prefix: str) -> str:
    return (
        f"{prefix}{load.rate:.1f} req/s, p50 {seconds(load.percentile(50))}, "
        f"p99 {seconds(load.percentile(99))} ({len(load.latencies)} req in {load.seconds:.1f} s)"
    )
