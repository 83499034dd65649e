"""A fuzzing campaign: mutants sent to a live server by a few client threads, each answer judged.

An answer passes when it is 2xx, or a 4xx `application/problem+json` whose `code` is in the
catalogue with that very status, and it arrives within the time bound. Anything else (a 5xx, a
hang, an undocumented answer, a dropped connection) is a defect; so is a marker file created by
a payload.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from app.http.problems import CATALOGUE, PROBLEM_MEDIA_TYPE
from tests.fuzz.mutants import Corpus, Mutant, make_mutant

#: Seconds an answer may take; past it the request counts as a hang.
TIME_BOUND_S = 30.0
_ABORT_AFTER_CONNECTION_ERRORS = 5


@dataclass(frozen=True)
class Defect:
    """An answer that breaks the promise: what, for which mutant and request, what came back."""

    index: int
    kind: str
    detail: str
    mutant: str
    request: str
    status: int | None = None
    body: str = ""

    def render(self) -> str:
        """Several lines: kind, mutant, request, answer."""
        answer = f"{self.status} {self.body[:600]}" if self.status is not None else self.body
        return (
            f"[{self.kind}] {self.detail}\n  mutant:  {self.mutant}\n"
            f"  request: {self.request}\n  answer:  {answer}"
        )


@dataclass
class Summary:
    """What a campaign sent and got back."""

    seed: int
    sent: int = 0
    seconds: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    findings: Counter[str] = field(default_factory=Counter)
    endpoints: Counter[str] = field(default_factory=Counter)
    defects: list[Defect] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    slowest: list[tuple[float, int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No defect and no marker file."""
        return not self.defects and not self.markers

    def by_class(self) -> dict[str, int]:
        """Answers by status class (2xx, 4xx, 5xx, ...), hangs and connection errors."""
        out: Counter[str] = Counter()
        for status, n in self.statuses.items():
            out[f"{status // 100}xx"] += n
        for defect in self.defects:
            if defect.kind in ("hang", "connection"):
                out[defect.kind] += 1
        return dict(sorted(out.items()))

    def render(self) -> str:
        """A human summary: counts, codes, slowest requests, defects."""
        rate = self.sent / self.seconds if self.seconds else 0.0
        lines = [
            f"seed {self.seed}: {self.sent} mutants in {self.seconds:.1f} s ({rate:.1f}/s)",
            "answers: " + ", ".join(f"{k}={v}" for k, v in self.by_class().items()),
            "endpoints: " + ", ".join(f"{k}={v}" for k, v in sorted(self.endpoints.items())),
            f"problem codes ({len(self.codes)}): "
            + ", ".join(f"{c}={n}" for c, n in self.codes.most_common()),
            f"finding codes in 200 reports ({len(self.findings)}): "
            + ", ".join(f"{c}={n}" for c, n in self.findings.most_common(25)),
            "slowest: "
            + ", ".join(f"#{i} {s:.2f}s {where}" for s, i, where in sorted(self.slowest)[-5:]),
            f"marker files: {self.markers or 'none'}",
            f"defects: {len(self.defects)}",
            *(d.render() for d in self.defects[:50]),
        ]
        return "\n".join(lines)


def judge(answer: httpx.Response) -> tuple[str, str | None]:
    """The answer's problem code ('' for 2xx) and what is wrong with it, if anything."""
    status = answer.status_code
    if 200 <= status < 300:
        return "", None
    code = ""
    problem: dict[str, object] = {}
    try:
        parsed = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        problem = parsed
    if isinstance(problem.get("code"), str):
        code = str(problem["code"])
    if status >= 500:
        return code, f"server error {status} {code}"
    if not 400 <= status < 500:
        return code, f"unexpected status {status}"
    if answer.headers.get("content-type") != PROBLEM_MEDIA_TYPE:
        return code, f"{status} with content-type {answer.headers.get('content-type')!r}"
    if code not in CATALOGUE:
        return code, f"code {code!r} is not in the catalogue"
    if CATALOGUE[code].status != status or problem.get("status") != status:
        return code, f"code {code!r} is catalogued as {CATALOGUE[code].status}, answered {status}"
    return code, None


def _findings(answer: httpx.Response) -> list[str]:
    if not answer.headers.get("content-type", "").startswith("application/json"):
        return []
    try:
        body = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(body, dict) or not isinstance(body.get("findings"), list):
        return []
    return [f["code"] for f in body["findings"] if isinstance(f, dict) and "code" in f]


class _Shared:
    """State the client threads share: the next index, the summary, the stop flag."""

    def __init__(self, indices: Iterator[int], summary: Summary, deadline: float) -> None:
        self.indices = indices
        self.summary = summary
        self.deadline = deadline
        self.lock = threading.Lock()
        self.stop = False
        self.connection_errors = 0

    def next_index(self) -> int | None:
        """The next mutant to send, or None once stopped, past the deadline or all sent."""
        with self.lock:
            if self.stop or time.monotonic() > self.deadline:
                return None
            return next(self.indices, None)


def run_campaign(
    url: str,
    corpus: Corpus,
    *,
    seed: int,
    mutants: int,
    marker_dir: Path,
    minutes: float | None = None,
    threads: int = 3,
    only: Sequence[int] | None = None,
    focus: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
    progress_every_s: float = 10.0,
    keep: Callable[[Mutant, Defect], None] | None = None,
) -> Summary:
    """Send mutants 0..mutants-1 (or `only` those) of campaign `seed` to the server at `url`
    (to the `focus` endpoints only, if given), stopping early after `minutes`; judge every
    answer."""
    summary = Summary(seed)
    indices = iter(only if only is not None else range(mutants))
    deadline = time.monotonic() + (minutes * 60 if minutes else float("inf"))
    shared = _Shared(indices, summary, deadline)
    total = len(only) if only is not None else mutants
    start = time.monotonic()

    def client_loop() -> None:
        with httpx.Client(base_url=url) as client:
            while (index := shared.next_index()) is not None:
                try:
                    mutant = make_mutant(corpus, seed, index, marker_dir, focus)
                except Exception as exc:  # a fuzzer bug must fail the campaign, not a thread
                    with shared.lock:
                        shared.summary.defects.append(
                            Defect(index, "fuzzer-error", f"{type(exc).__name__}: {exc}", "", "")
                        )
                    continue
                _one(client, mutant, shared, keep)

    workers = [threading.Thread(target=client_loop, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    last = start
    while any(w.is_alive() for w in workers):
        for worker in workers:
            worker.join(timeout=0.5)
        if progress is not None and time.monotonic() - last >= progress_every_s:
            last = time.monotonic()
            with shared.lock:
                progress(_progress_line(summary, total, last - start))
    summary.seconds = time.monotonic() - start
    summary.markers = sorted(p.name for p in marker_dir.iterdir())
    return summary


def _progress_line(summary: Summary, total: int, elapsed: float) -> str:
    classes = ", ".join(f"{k}={v}" for k, v in summary.by_class().items())
    return (
        f"[{summary.sent}/{total}] {elapsed:.0f} s, {summary.sent / max(elapsed, 1e-9):.1f}/s; "
        f"{classes}; {len(summary.codes)} codes; {len(summary.defects)} defects"
    )


def _one(
    client: httpx.Client,
    mutant: Mutant,
    shared: _Shared,
    keep: Callable[[Mutant, Defect], None] | None,
) -> None:
    request = mutant.request
    started = time.monotonic()
    defect: Defect | None = None
    code = ""
    findings: list[str] = []
    status: int | None = None
    try:
        answer = request.send(client, TIME_BOUND_S)
        status = answer.status_code
        code, wrong = judge(answer)
        findings = _findings(answer) if status == 200 else []
        elapsed = time.monotonic() - started
        if wrong is None and elapsed > TIME_BOUND_S:
            wrong = f"answered after {elapsed:.1f} s"
        if wrong is not None:
            kind = "server-error" if status >= 500 else "undocumented"
            if elapsed > TIME_BOUND_S:
                kind = "hang"
            defect = Defect(
                mutant.index,
                kind,
                wrong,
                mutant.describe(),
                request.describe(),
                status,
                answer.text[:2000],
            )
    except httpx.TimeoutException as exc:
        defect = Defect(
            mutant.index,
            "hang",
            f"no answer within {TIME_BOUND_S:.0f} s ({type(exc).__name__})",
            mutant.describe(),
            request.describe(),
        )
    except httpx.TransportError as exc:
        defect = Defect(
            mutant.index,
            "connection",
            f"{type(exc).__name__}: {exc}",
            mutant.describe(),
            request.describe(),
        )
    elapsed = time.monotonic() - started
    with shared.lock:
        summary = shared.summary
        summary.sent += 1
        summary.endpoints[request.endpoint] += 1
        if status is not None:
            summary.statuses[status] += 1
        if code:
            summary.codes[code] += 1
        summary.findings.update(findings)
        summary.slowest.append((elapsed, mutant.index, request.endpoint))
        summary.slowest = sorted(summary.slowest)[-5:]
        if defect is not None:
            summary.defects.append(defect)
            if defect.kind == "connection":
                shared.connection_errors += 1
                shared.stop = shared.connection_errors >= _ABORT_AFTER_CONNECTION_ERRORS
    if defect is not None and keep is not None:
        keep(mutant, defect)
