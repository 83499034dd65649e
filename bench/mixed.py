"""`make bench`'s mixed load: tests/load.py's clients against `pt2serde serve` as deployed for
a time window, and its section of RESULTS.md.
"""

from __future__ import annotations

from bench import service
from bench.programs import Program
from bench.progress import progress
from bench.report import seconds
from tests.load import WARM_CONNECTIONS, Call, Mixed, mix, run


def section(load: Mixed, calls: list[Call], about: str) -> str:
    """The RESULTS.md section of a mixed load."""
    statuses = ", ".join(f"{s}: {n}" for s, n in sorted(load.statuses().items()))
    verdict = "holds" if load.server_errors == 0 else "FAIL"
    lines = [
        "## Mixed load",
        "",
        f"{about}. {load.clients} clients for {load.seconds:.0f} s, each on one keep-alive "
        "connection cycling through the requests below (validate at every level, canonicalize "
        "and registry pushes, on a small and a large program), after an untimed warm-up round.",
        "",
        f"- **requests**: {len(load.done) + len(load.lost)} "
        f"({len(load.done) / load.seconds:.1f} answered a second); statuses {statuses}",
        f"- **5xx or no answer**: {load.server_errors} (target 0: {verdict}), {load.warm_errors} "
        f"of them in the untimed warm-up round (every request once on {WARM_CONNECTIONS} "
        "connections)"
        + (f"; first lost: {load.lost[0]}" if load.lost else "")
        + "".join(f"; {failure}" for failure in load.failures[:3]),
        f"- **latency, all requests**: p50 {seconds(load.percentile(50))}, "
        f"p99 {seconds(load.percentile(99))}, max {seconds(load.percentile(100))}",
        "",
        "| request | body | n | p50 | p99 | max |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for call in calls:
        count = len(load.latencies(call.label))
        lines.append(
            f"| {call.label} | {len(call.body) / 1e6:.2f} MB | {count} | "
            f"{seconds(load.percentile(50, call.label))} | "
            f"{seconds(load.percentile(99, call.label))} | "
            f"{seconds(load.percentile(100, call.label))} |"
        )
    return "\n".join(lines) + "\n"


def bench_section(small: Program, large: Program, clients: int, window: float) -> tuple[str, bool]:
    """Run the mixed load against `pt2serde serve` as deployed; its RESULTS.md section, and
    whether it held (no 5xx)."""
    calls = mix(small.document, small.archive_bytes, large.document, large.archive_bytes)
    server = service.start_server()
    try:
        progress(f"mixed load: {clients} clients for {window:.0f} s")
        load = run(server.host, server.port, calls, clients, window, max_requests=1_000_000)
    finally:
        service.stop_server(server)
    about = (
        f"`pt2serde serve` as deployed (default settings: one HTTP process per CPU), small = "
        f"{small.name} ({small.nodes:,} nodes), large = {large.name} ({large.nodes:,} nodes)"
    )
    return section(load, calls, about), load.server_errors == 0
