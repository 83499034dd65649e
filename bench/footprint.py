"""The service's idle footprint: what `pt2serde serve` as deployed holds once
the largest bench program has gone through it and it sits idle.

The program is posted once to `/v1/validate?level=torch`, which takes it through both pools (a
document worker checks it, a torch worker loads it). Then the server is left alone until its
memory stops falling (workers a large job left bloated are recycled after it), and the resident
set of every process of the server's tree is summed, read from /proc: the uvicorn supervisor,
the HTTP processes, their document workers, the torch forkserver and torch workers, and
multiprocessing's resource tracker. RSS counts pages shared between processes (a forked torch
worker shares most of torch with its forkserver) once per process; PSS splits them, so it is
what the processes cost the host together. The target is judged on RSS, the stricter of the two.
"""

from __future__ import annotations

import http.client
import time

import orjson

from bench import service
from bench.programs import Program
from bench.progress import progress
from tests.processes import Process, processes

MiB = 1024 * 1024
#: the target: the service's processes hold less than this in all, idle (1 GB)
TARGET = 1000 * 1000 * 1000
#: the memory is settled once its sum has not fallen for this long
SETTLED_S = 3.0


def settle(root: int, limit_s: float) -> list[Process]:
    """The server's processes once their summed RSS has held within 1 MiB for SETTLED_S seconds
    (workers starting, or exiting after a job that left them large), or after `limit_s`."""
    deadline = time.monotonic() + limit_s
    last = sum(p.rss for p in processes(root))
    since = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < SETTLED_S:
        time.sleep(0.25)
        now = sum(p.rss for p in processes(root))
        if abs(now - last) > MiB:
            last, since = now, time.monotonic()
    return processes(root)


def _post_torch(server: service.Server, archive: bytes) -> tuple[int, bytes, float]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=1800)
    try:
        began = time.perf_counter()
        conn.request(
            "POST",
            "/v1/validate?level=torch",
            body=archive,
            headers={"Content-Type": "application/zip"},
        )
        response = conn.getresponse()
        return response.status, response.read(), time.perf_counter() - began
    finally:
        conn.close()


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


def _table(states: list[tuple[str, list[Process]]]) -> list[str]:
    roles = sorted({p.role for _, found in states for p in found})
    lines = [
        "| when | " + " | ".join(roles) + " | all (RSS) | all (PSS) |",
        "|---" * (len(roles) + 3) + "|",
    ]
    for label, found in states:
        cells = []
        for role in roles:
            mine = [p for p in found if p.role == role]
            cells.append(f"{len(mine)}: {_mb(sum(p.rss for p in mine))}" if mine else "—")
        total_rss, total_pss = sum(p.rss for p in found), sum(p.pss for p in found)
        lines.append(f"| {label} | {' | '.join(cells)} | {_mb(total_rss)} | {_mb(total_pss)} |")
    return lines


def bench_section(program: Program) -> tuple[str, bool]:
    """Measure the idle footprint after `program`; its RESULTS.md section, and whether the
    program was answered as valid (the figure counts only then)."""
    server = service.start_server()
    try:
        # the document workers start with each HTTP process: let them finish their imports
        booted = settle(server.process.pid, 30.0)
        progress(f"footprint: {program.name} through validate?level=torch")
        status, body, took = _post_torch(server, program.archive_bytes)
        answered = processes(server.process.pid)
        idle = settle(server.process.pid, 60.0)
    finally:
        service.stop_server(server)
    valid = status == 200 and orjson.loads(body).get("valid") is True
    total = sum(p.rss for p in idle)
    verdict = "MET" if total < TARGET else "MISSED"
    lines = [
        "## Idle footprint",
        "",
        f"`pt2serde serve` as deployed (default settings), after {program.name} "
        f"({program.nodes:,} nodes, {program.archive.stat().st_size / 1e6:.0f} MB archive) went "
        f"through `/v1/validate?level=torch` ({status} in {took:.1f} s"
        f"{'' if valid else f', NOT VALID: {body[:200]!r}'}), once its memory stopped "
        "changing. Each cell: how many processes, and their resident sets summed (from /proc); "
        "PSS divides each shared page among the processes that map it.",
        "",
        *_table([("started", booted), ("just answered", answered), ("idle", idle)]),
        "",
        f"- **idle footprint**: {_mb(total)} RSS in all (target < 1 GB): "
        f"{verdict if valid else 'FAIL (no valid answer)'}",
        "",
    ]
    return "\n".join(lines), valid
