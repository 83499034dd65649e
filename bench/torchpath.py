"""The torch path against torch itself, on a ViT-Base-size program (~350 MB archive).

Whole processes, as a user runs them: `pt2serde validate --level torch X.pt2` against a Python
process that runs `torch.export.load(X)`, and `pt2serde deserialize X.pt2 -o Y.pt2` against one
that runs `torch.export.load` then `torch.export.save`. Over HTTP (a warm server, as
`bench.service` starts it) `/v1/deserialize` against torch's load + save in this process.
Ours' and torch's runs alternate, so a busy moment of the machine falls on both alike; each
side's first output is checked (torch loads it and it computes what the input program does)
before any time counts.
"""

from __future__ import annotations

import http.client
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import torch
from torch import nn

from bench.cases import Measured
from bench.measure import CheckFailed, Timing
from bench.programs import Cache, Program, _document, _save, node_count
from bench.progress import progress
from bench.report import Row, timing_row

#: Bump when the model changes, so a stale archive is not reused.
VIT_VERSION = 1
ROOT = Path(__file__).resolve().parents[1]
ZIP = "application/zip"


class _ViTBase(nn.Module):
    """ViT-Base (transformers' ViTModel at its base sizes) returning plain tensors, so that
    loading the program needs no output types registered (torch's process imports only torch)."""

    def __init__(self) -> None:
        super().__init__()
        os.environ["HF_HUB_OFFLINE"] = "1"
        import transformers

        config = transformers.ViTConfig(
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            image_size=224,
            patch_size=16,
            num_channels=3,
        )
        self.vit = transformers.ViTModel(config)

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The last hidden state and the pooled output."""
        out = self.vit(pixel_values)
        return out.last_hidden_state, out.pooler_output


def vit_inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
    """One random 224x224 image."""
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(1, 3, 224, 224, generator=generator),), {}


def vit_program(cache: Cache) -> Program:
    """The cached export of ViT-Base with random weights (exported on a cache miss)."""

    def make(target: Path) -> None:
        torch.manual_seed(0)
        module = _ViTBase().eval()
        args, kwargs = vit_inputs()
        _save(torch.export.export(module, args, kwargs, strict=False), target)

    path = cache.archive(f"vit-base{VIT_VERSION}", make)
    document = _document(path)
    return Program(
        "vit-base",
        "transformers ViTModel, base sizes, random weights, torch.export",
        node_count(document),
        document,
        path,
        vit_inputs,
    )


# ---------------------------------------------------------------- the sides


#: torch's own processes: load, and load + save (argv: the archive, the output).
TORCH_LOAD = "import sys, torch; torch.export.load(sys.argv[1])"
TORCH_LOAD_SAVE = (
    "import sys, torch; torch.export.save(torch.export.load(sys.argv[1]), sys.argv[2])"
)


#: One run of a side: wall seconds, its output, and its CPU seconds (a process tree's user +
#: system time; None in this process, where other threads would count).
Run = tuple[float, bytes, float | None]


def _process(argv: list[str]) -> Run:
    """A whole process' wall time, stdout and CPU time; CheckFailed if it fails.

    Its CPU time counts the children it waited for: our CLI's torch worker (forked, then
    joined), not a forkserver's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=False)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise CheckFailed(
            f"{' '.join(argv[:4])} ... exited {done.returncode}: {done.stderr[-300:]!r}"
        )
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, done.stdout, cpu


def _ours(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", *args]


def _torch(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


# ---------------------------------------------------------------- checks


def _reference(program: Program) -> Any:
    """What the input program computes on its inputs (torch loads the archive we made)."""
    args, kwargs = program.inputs()
    return torch.export.load(program.archive).module()(*args, **kwargs)


def _same_outputs(program: Program, expected: Any, archive: Path, who: str) -> None:
    """CheckFailed unless torch loads `archive` and it computes what the input program does."""
    from tests.zoo import outputs_close

    args, kwargs = program.inputs()
    try:
        got = torch.export.load(archive).module()(*args, **kwargs)
    except Exception as exc:
        raise CheckFailed(f"torch cannot load or run {who}'s output: {exc}") from None
    if not outputs_close(got, expected):
        raise CheckFailed(f"{who}'s output computes other values than the input program")


def _valid_report(stdout: bytes) -> None:
    report = orjson.loads(stdout)
    if not report.get("valid") or report.get("level") != "torch" or "torch" in report["unchecked"]:
        raise CheckFailed(f"validate --level torch did not find the program valid: {report}")


# ---------------------------------------------------------------- the rows


def measure_cli(program: Program, runs: int, work: Path) -> dict[str, Measured]:
    """`validate --level torch` and `deserialize` as processes, against torch's processes."""
    archive = str(program.archive)
    measured: dict[str, Measured] = {}
    ours_out, torch_out = work / "ours.pt2", work / "torch.pt2"
    progress(f"torch path: {program.name} validate --level torch vs a torch.export.load process")
    measured["validate-torch"] = _compare(
        lambda: _process(_ours("validate", "--level", "torch", "--json", archive)),
        lambda: _process(_torch(TORCH_LOAD, archive)),
        lambda ours, _: _valid_report(ours),
        runs,
    )
    expected = _reference(program)
    progress(f"torch path: {program.name} deserialize vs a torch load + save process")
    measured["deserialize-cli"] = _compare(
        lambda: _process(_ours("deserialize", archive, "-o", str(ours_out))),
        lambda: _process(_torch(TORCH_LOAD_SAVE, archive, str(torch_out))),
        lambda _, __: _both_compute(program, expected, ours_out, torch_out),
        runs,
    )
    return measured


def _both_compute(program: Program, expected: Any, ours: Path, theirs: Path) -> None:
    _same_outputs(program, expected, ours, "pt2serde deserialize")
    _same_outputs(program, expected, theirs, "torch's load + save")


def _compare(
    ours: Callable[[], Run],
    theirs: Callable[[], Run],
    check: Callable[[bytes, bytes], None],
    runs: int,
) -> Measured:
    """Both sides `runs` times by wall clock, alternating which goes first (a busy moment of
    the machine falls on both alike); the first round's outputs are checked before it counts."""
    mine: list[Run] = []
    torch_runs: list[Run] = []
    try:
        for i in range(runs):
            sides = [(ours, mine), (theirs, torch_runs)]
            for side, done in sides if i % 2 == 0 else reversed(sides):
                done.append(side())
            if i == 0:
                check(mine[0][1], torch_runs[0][1])
    except CheckFailed as exc:
        return Measured(failure=str(exc))
    cpu = [
        min((r[2] for r in side if r[2] is not None), default=None) for side in (mine, torch_runs)
    ]
    return Measured(
        ours=Timing.of([r[0] for r in mine], None),
        torch=Timing.of([r[0] for r in torch_runs], None),
        checked="torch: it loads, same outputs",
        extra={"cpu": cpu},
    )


def measure_http(program: Program, runs: int, work: Path) -> Measured:
    """POST /v1/deserialize of the archive to a warm server (the first requests start its
    torch workers and are not timed) against torch's load + save in this process. CPU time:
    the server's process tree and the client thread against this process' (torch's threads)."""
    from bench import service

    body = program.archive.read_bytes()
    expected = _reference(program)
    ours_out, torch_out = work / "http.pt2", work / "inproc.pt2"
    progress(f"torch path: {program.name} HTTP /v1/deserialize vs torch load + save in process")
    server = service.start_server()
    try:
        _warm(server, body, ours_out)

        def ours() -> Run:
            cpu = service.tree_cpu(server.process.pid) + time.thread_time()
            started = time.perf_counter()
            _deserialize_over_http(server, body, ours_out)
            took = time.perf_counter() - started
            client = time.thread_time()
            time.sleep(0.2)  # the workers' share of the request is counted once they are idle
            return took, b"", service.tree_cpu(server.process.pid) + client - cpu

        def theirs() -> Run:
            cpu = time.process_time()
            started = time.perf_counter()
            torch.export.save(torch.export.load(program.archive), torch_out)
            return time.perf_counter() - started, b"", time.process_time() - cpu

        return _compare(
            ours, theirs, lambda _, __: _both_compute(program, expected, ours_out, torch_out), runs
        )
    finally:
        service.stop_server(server)


def _warm(server: Any, body: bytes, target: Path) -> None:
    """Requests until every HTTP process of the server has started its torch pool (each has
    its own; which process a connection lands on is the kernel's choice), at most 8."""
    from tests.processes import processes

    for _ in range(8):
        _deserialize_over_http(server, body, target)
        roles = [p.role for p in processes(server.process.pid)]
        if roles.count("torch forkserver") >= roles.count("HTTP process"):
            return


#: The piece of the answer the client reads and writes at a time.
_ANSWER_CHUNK = 4 * 1024 * 1024


def _deserialize_over_http(server: Any, body: bytes, target: Path) -> None:
    """POST the archive as a plain body; the answer goes to `target` as it arrives, as a client
    saving a 350 MB file would (not joined in memory first)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=600)
    try:
        conn.request("POST", "/v1/deserialize", body=body, headers={"Content-Type": ZIP})
        response = conn.getresponse()
        if response.status != 200:
            answer = response.read()
            raise CheckFailed(f"/v1/deserialize answered {response.status}: {answer[:300]!r}")
        # one buffer, filled again and again, as curl or wget would (a fresh 4 MiB object per
        # read would cost the client a page fault per 4 KiB)
        buffer = memoryview(bytearray(_ANSWER_CHUNK))
        with target.open("wb") as out:
            while got := response.readinto(buffer):
                out.write(buffer[:got])
    finally:
        conn.close()


def measure(cache: Cache, runs: int = 3, *, http: bool = True) -> list[Row]:
    """The torch path's rows on the ViT-Base program."""
    program = vit_program(cache)
    size = program.archive.stat().st_size
    with tempfile.TemporaryDirectory(prefix="pt2serde-torchpath-") as folder:
        measured = measure_cli(program, runs, Path(folder))
        if http:
            measured["deserialize-http"] = measure_http(program, runs, Path(folder))
    rows = []
    for bench, m in measured.items():
        row = timing_row(bench, program.name, program.nodes, size, [("", m)])
        ours_cpu, torch_cpu = m.extra.get("cpu", (None, None))
        if ours_cpu is not None and torch_cpu is not None:
            row.notes.append(
                f"{program.name} {bench}: CPU time of the process trees (user + system, best of "
                f"{runs}): ours {ours_cpu:.2f} s, torch's {torch_cpu:.2f} s"
            )
        rows.append(row)
    return rows
