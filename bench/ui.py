"""The web UI timed from a real browser (issue 32): a stored 50k-node program's version page, its
graph (outline) and the diff of two 50k-node versions, in Debian's Chromium driven by
Playwright against `pt2serde serve`.

The registry is filled once, by the push recipe itself (`app.jobs.push.prepare`, torch's check
included, run in this process with no job time limit: torch's check of 50,007 nodes takes
minutes, past a server's job limit) and kept under the cache directory, so that a run costs
the timings only. Each page is timed from navigation to its ready marker (`body[data-ready]`),
on the same server's data: "cold" is the first visit after the server started (the answers were
computed once before, by an earlier server), "warm" the best of the visits after it in the same
browser.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.jobs.push import prepare
from app.jobs.runners import INLINE
from app.registry.store import Registry
from app.settings import MiB, Settings
from bench import service
from bench.programs import Cache, Program, decoder_program, tiled_program
from bench.progress import progress
from bench.report import Row, load_average, megabytes, seconds, table

#: Bump when the stored programs change, so a stale registry is not reused.
REGISTRY_VERSION = 1
MODEL = "decoder-50k"
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync"]
#: the server reads these programs: the 50k document (~61 MB) and its ~5k weight members
LIMITS = {"PT2SERDE_MAX_JSON_BYTES": str(256 * MiB), "PT2SERDE_MAX_MEMBERS": "100000"}
#: visits of each page after the cold one
WARM_VISITS = 3


@dataclass(frozen=True)
class Page:
    """One timed page: its row's name, its address and its target (seconds)."""

    bench: str
    path: str
    target: float
    #: the performance mark that says the page is ready (app.js marks "ready")
    mark: str = "ready"
    #: the longest main-thread task allowed until then (seconds), when judged
    longest: float | None = None


PAGES = (
    Page("version page ready", f"/ui/models/{MODEL}/versions/2", 1.0),
    Page("graph (outline) ready", f"/ui/models/{MODEL}/versions/2/graph", 1.0),
    Page("diff of the two 50k versions ready", f"/ui/models/{MODEL}/diff?from=1&to=2", 2.0),
    # the drawing's layout comes back from its web worker (app/ui/pages/graph.js marks it)
    Page("drawn graph ready", f"/ui/models/{MODEL}/versions/2/graph", 2.0, "graph-drawn", 0.2),
)
#: every long task (over 50 ms) of the page's main thread, as the browser reports them
LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__longTasks.push([entry.startTime, entry.duration]);
}).observe({ type: "longtask", buffered: true });
"""


def _settings(data: Path) -> Settings:
    return Settings(data_dir=data, max_json_bytes=256 * MiB, max_members=100_000, gc_interval_s=0)


def stored_registry(cache: Cache) -> tuple[Path, list[Program]]:
    """The data directory of a registry holding decoder-50k as v1 (999 blocks, 49,957 nodes) and
    v2 (1,000 blocks, 50,007 nodes), filled once."""
    base = decoder_program(cache, 20)
    programs = [tiled_program(cache, base, 999), tiled_program(cache, base, 1000)]
    data = cache.dir / f"ui-registry-v{REGISTRY_VERSION}"
    if (data / "filled").exists():
        return data, programs
    shutil.rmtree(data, ignore_errors=True)
    registry = Registry(_settings(data))
    try:
        for program in programs:
            started = time.perf_counter()
            progress(f"pushing {program.name} into the UI bench's registry (torch's check)")
            candidate = prepare(registry, program.archive, INLINE, INLINE)
            registry.push(MODEL, candidate)
            progress(f"pushed {program.name} in {time.perf_counter() - started:.0f} s")
    finally:
        registry.close()
    (data / "filled").touch()
    return data, programs


@contextmanager
def serving(data: Path) -> Iterator[service.Server]:
    """`pt2serde serve` over the registry in `data`."""
    server = service.start_server({"PT2SERDE_DATA_DIR": str(data), **LIMITS})
    try:
        yield server
    finally:
        service.stop_server(server)


@dataclass
class Visits:
    """One page's timings (seconds from navigation to its ready marker)."""

    page: Page
    #: the first visit after a server restart, in a fresh browser (no HTTP cache)
    cold: float = float("nan")
    #: the visits after it, in the same browser
    warm: list[float] = field(default_factory=list)
    #: the visit that computed the answers (when they were not kept yet)
    first: float = float("nan")
    failure: str = ""
    #: the longest main-thread task before the mark, of each timed visit (seconds)
    tasks: list[float] = field(default_factory=list)


def _visit(browser: Any, context: Any, url: str, page: Page) -> tuple[float, float]:
    """Navigate a new tab of `context` to the page: seconds to its mark, and the longest
    main-thread task before it (ValueError with what went wrong when the page logged an error
    or showed one)."""
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(str(e)))
    mark = f"performance.getEntriesByName({page.mark!r})"
    try:
        started = time.perf_counter()
        tab.goto(url + page.path)
        tab.wait_for_selector("body[data-ready='1']", timeout=300_000)
        # polled from here: wait_for_function evaluates a string, which the UI's CSP refuses
        deadline = time.monotonic() + 300
        while not tab.evaluate(f"{mark}.length") and time.monotonic() < deadline:
            time.sleep(0.02)
        waited = time.perf_counter() - started
        shown = tab.query_selector(".error")
        if shown is not None:
            errors.append(shown.inner_text())
        # app.js marks the moment; a UI without the mark is timed by the wait (a poll later)
        ready = tab.evaluate(f"({mark}[0] || {{}}).startTime")
        longest = tab.evaluate(
            f"Math.max(0, ...window.__longTasks.filter(([at]) => at < {mark}[0].startTime)"
            ".map(([, duration]) => duration))"
        )
    finally:
        tab.close()
    if errors:
        raise ValueError("; ".join(errors)[:300])
    return (waited if ready is None else float(ready) / 1000), float(longest) / 1000


def _context(browser: Any) -> Any:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.add_init_script(LONG_TASKS)
    return context


def measure(serve: Callable[[], AbstractContextManager[str]]) -> list[Visits]:
    """Each page's cold and warm timings; `serve` starts a server (its base URL) over a
    registry holding decoder-50k v1 and v2 and stops it when its block ends."""
    from playwright.sync_api import sync_playwright

    results = [Visits(page) for page in PAGES]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            with serve() as url:
                context = _context(browser)
                for visits in results:
                    progress(f"UI: {visits.page.bench}: the visit that computes its answers")
                    try:
                        visits.first, _ = _visit(browser, context, url, visits.page)
                    except ValueError as failed:
                        visits.failure = str(failed)
                context.close()
            for visits in results:
                if visits.failure:
                    continue
                progress(f"UI: {visits.page.bench}: cold, then warm")
                with serve() as url:
                    context = _context(browser)
                    try:
                        visits.cold, longest = _visit(browser, context, url, visits.page)
                        visits.tasks.append(longest)
                        for _ in range(WARM_VISITS):
                            took, longest = _visit(browser, context, url, visits.page)
                            visits.warm.append(took)
                            visits.tasks.append(longest)
                    except ValueError as failed:
                        visits.failure = str(failed)
                    context.close()
        finally:
            browser.close()
    return results


def rows(results: list[Visits], programs: list[Program]) -> list[Row]:
    """The table's rows: cold and warm against the target."""
    found = []
    nodes = " and ".join(f"{p.nodes:,}" for p in programs)
    size = " + ".join(megabytes(p.archive.stat().st_size) for p in programs)
    for visits in results:
        page = visits.page
        warm = min(visits.warm) if visits.warm else float("nan")
        if visits.failure:
            status = f"FAIL ({visits.failure})"
        elif max(visits.cold, warm) > page.target:
            status = "MISSED"
        elif page.longest is not None and max(visits.tasks) > page.longest:
            status = f"MISSED (a {seconds(max(visits.tasks))} task)"
        else:
            status = "MET"
        row = Row(
            f"web UI in Chromium: {page.bench}, cold / warm ({page.path})",
            MODEL,
            nodes if "diff" in page.bench else f"{programs[-1].nodes:,}",
            size if "diff" in page.bench else megabytes(programs[-1].archive.stat().st_size),
            "ui",
            ours=f"{seconds(visits.cold)} / {seconds(warm)}",
            checked="the page drawn with no error",
            target=f"≤{page.target:g} s cold and warm"
            + (f", no task over {seconds(page.longest)}" if page.longest is not None else ""),
            status=status,
        )
        row.notes.append(
            f"{page.bench}: the visit that computed the answers took {seconds(visits.first)}; "
            f"warm visits {', '.join(seconds(w) for w in visits.warm)}; longest main-thread "
            f"task of each timed visit {', '.join(seconds(t) for t in visits.tasks)}"
        )
        found.append(row)
    return found


@contextmanager
def _served(data: Path) -> Iterator[str]:
    with serving(data) as server:
        yield f"http://{server.host}:{server.port}"


#: not "## Web UI...": that starts the sections the tests keep (bench.report.KEPT_SECTIONS)
HEADING = "## Browser timings of the web UI"


def bench_section(cache: Cache) -> tuple[str, bool]:
    """RESULTS.md's section of the UI's timings, and whether no page failed."""
    data, programs = stored_registry(cache)
    started = load_average()
    results = measure(lambda: _served(data))
    found = rows(results, programs)
    text = "\n".join(
        [
            HEADING,
            "",
            f"`pt2serde serve` (default settings, the 50k program's limits) over a registry "
            f"holding {MODEL} v1 (999 blocks) and v2 (1,000 blocks), pages opened in headless "
            "Debian Chromium (Playwright), timed from navigation to the page's ready marker. "
            "cold: the first visit after a server restart in a fresh browser, the answers "
            "computed once before by an earlier server; warm: the best of "
            f"{WARM_VISITS} visits after it. Load average {started} → {load_average()}.",
            "",
            table(found),
            "",
            *[f"- {n}" for row in found for n in row.notes],
            "",
        ]
    )
    return text, not any(r.status.startswith("FAIL") for r in found)
