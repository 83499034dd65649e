"""Each measurement in a fresh process forked from a warm one, so no row inherits another's heap.

In one process, the rows measured earlier leave their garbage, grown collector generations and
fragmented arenas behind, and a later row's figures swing with them: dump of decoder-1.0k took 2.5x,
2.7x and 4.2x orjson.dumps in three idle runs of one `python -m bench`, and the floor itself swung
(T5's orjson.dumps 4.2-8.8 ms there, 1.2 ms in a fresh process). A *zygote* starts once (a spawned
interpreter that imports what the measurements need: torch, schema, app, the bench, and runs the
programs' setup, such as registering custom ops and the Hugging Face output types) and holds no
program data. It forks one child per job; the child unpickles its job, runs it and sends the result
back, so every measurement starts from the same heap: ours and the floor alike.

multiprocessing's forkserver is not used: a process has one, and the app's worker pools own it.
Jobs and results cross as plain pickles between our own processes (no document is unpickled).
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, NoReturn, TypeVar

from bench import progress

T = TypeVar("T")

#: What every zygote imports before its warm-up: the measurements (and so torch, schema, app).
PRELOAD = ("bench.cases", "bench.schema_diff")


class ChildFailed(Exception):
    """A job raised in its child, or the child died before it answered."""


class Zygote:
    """A warm process that forks one child per job (see the module doc)."""

    def __init__(
        self, warm: Sequence[Callable[[], None]] = (), preload: Sequence[str] = PRELOAD
    ) -> None:
        self._warm = list(warm)
        self._preload = list(preload)
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> Connection:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        process = ctx.Process(
            target=_serve,
            args=(theirs, progress.started(), self._preload, self._warm),
            name="bench-zygote",
            daemon=True,
        )
        process.start()
        theirs.close()
        try:
            ours.recv_bytes()
        except EOFError as exc:
            raise ChildFailed(f"the zygote did not start ({_describe(process.exitcode)})") from exc
        self._process, self._conn = process, ours
        return ours

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a fresh child; its result, or ChildFailed."""
        conn = self._conn or self._start()
        try:
            conn.send_bytes(pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL))
            kind, value = pickle.loads(conn.recv_bytes())
            if kind == "exit":
                raise ChildFailed(f"the measuring process died ({_describe(value)})")
            conn.recv_bytes()  # the child's exit status: it answered, so it ended cleanly
        except (EOFError, OSError) as exc:
            self.close()  # the zygote itself died; the next job starts another
            raise ChildFailed(f"the zygote died ({type(exc).__name__})") from exc
        if kind == "error":
            raise ChildFailed(value)
        result: T = value
        return result

    def close(self) -> None:
        """Stop the zygote (a child still running finishes its job and exits)."""
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()
        self._process = self._conn = None


def _describe(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"


def _serve(
    conn: Connection, started: float, preload: list[str], warm: list[Callable[[], None]]
) -> None:
    """The zygote: import, warm up, then fork a child per job and report how each ended."""
    progress.follow(started)
    for module in preload:
        importlib.import_module(module)
    for setup in warm:
        setup()
    # what the imports made lives as long as the zygote: out of every child's collections
    gc.collect()
    gc.freeze()
    conn.send_bytes(b"ready")
    while True:
        try:
            job = [conn.recv_bytes()]
        except EOFError:
            return
        pid = os.fork()
        if pid == 0:
            _child(conn, job)
        job.clear()
        _, status = os.waitpid(pid, 0)
        conn.send_bytes(pickle.dumps(("exit", os.waitstatus_to_exitcode(status))))


def _child(conn: Connection, job: list[bytes]) -> NoReturn:
    code = 0
    try:
        fn, args = pickle.loads(job.pop())
        reply = pickle.dumps(("ok", fn(*args)), pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        reply = pickle.dumps(("error", f"raised {type(exc).__name__}: {str(exc)[:200]}{at}"))
        code = 1
    try:
        conn.send_bytes(reply)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
