"""`pt2serde serve`: the HTTP service under uvicorn.

With several HTTP processes, uvicorn's supervisor spawns them and nothing of uvicorn's ends
them if the supervisor itself is killed: each would keep the port, its torch workers and their
memory for good. So each HTTP process ends with its supervisor (`app.workers.lifeline`), and
every stop, however it was asked for, ends within the graceful shutdown plus `STOP_MARGIN_S`:
what each HTTP process started (torch and document workers, the forkserver) ends with it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_OK, EXIT_USAGE, Parser
from app.settings import Settings
from app.workers import lifeline

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from app.cli.common import Subcommands

#: Tells an HTTP process the pid of the supervisor it must not outlive.
SUPERVISOR_ENV = "PT2SERDE_SUPERVISOR_PID"
#: What a stopping HTTP process may take beyond the graceful shutdown (closing its pools, its
#: interpreter's exit) before it kills itself.
STOP_MARGIN_S = 10.0

Handler = Callable[[int, FrameType | None], Any]

#: Set once this process was asked to stop (SIGTERM or SIGINT).
_stopping = threading.Event()


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.api.auth import startup_problem
    from app.http.protocol import PROTOCOL

    settings = Settings.from_env()
    refused = startup_problem(settings, args.host or settings.host)
    if refused is not None:
        sys.stderr.write(f"pt2serde: {refused}\n")
        return EXIT_USAGE
    # inherited by the HTTP processes uvicorn spawns
    os.environ[SUPERVISOR_ENV] = str(os.getpid())
    uvicorn.run(
        f"{__name__}:http_app",
        factory=True,
        http=PROTOCOL,
        host=args.host or settings.host,
        port=args.port or settings.port,
        workers=args.workers or settings.http_workers or os.cpu_count() or 1,
        log_level="info",
        timeout_keep_alive=settings.http_keep_alive_s,
        limit_concurrency=settings.http_max_connections or None,
        timeout_graceful_shutdown=settings.http_graceful_shutdown_s,
        timeout_worker_healthcheck=settings.http_healthcheck_timeout_s,
    )
    return EXIT_OK


def http_app() -> ASGIApp:
    """The service as an HTTP process of `pt2serde serve` runs it: its stop is bounded, and under
    a supervisor (several HTTP processes) it ends when the supervisor does.

    uvicorn calls this in the process that serves, on its main thread, once its own signal
    handlers are installed."""
    limit = Settings.from_env().http_graceful_shutdown_s + STOP_MARGIN_S
    _bound_stop(limit)
    supervisor = int(os.environ.get(SUPERVISOR_ENV) or 0)
    if supervisor and supervisor != os.getpid():
        # uvicorn's supervisor forks from its main thread: the signal is sound there; a
        # supervisor that ended before it was asked for is seen by the watch
        lifeline.signal_on_parent_death(supervisor, signal.SIGTERM)
        lifeline.watch_parent(supervisor, lambda: _stop_self(limit), "pt2serde-supervisor-watch")
    from app.http.stopping import RefusedWhenStopped
    from app.main import app

    return RefusedWhenStopped(app, _stopping)


def _stop_self(limit_s: float) -> None:
    # armed here too: the handler that arms it runs only when the main thread runs Python
    lifeline.kill_self_after(limit_s)
    # uvicorn's own handler: the graceful shutdown
    os.kill(os.getpid(), signal.SIGTERM)


def _bound_stop(limit_s: float) -> None:
    """Chain onto uvicorn's SIGTERM and SIGINT handlers: the first of them arms a SIGKILL of this
    process `limit_s` seconds later, in case the graceful shutdown or the interpreter's exit
    hangs (a supervisor waits for its HTTP processes without a limit)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if callable(previous):
            signal.signal(signum, _bounded(previous, limit_s))


def _bounded(previous: Handler, limit_s: float) -> Handler:
    def handler(signum: int, frame: FrameType | None) -> None:
        _stopping.set()
        lifeline.kill_self_after(limit_s)
        previous(signum, frame)

    return handler


def register(sub: Subcommands, shared: Parser) -> None:
    """Add `serve`."""
    serve = sub.add_parser("serve", help="run the HTTP service", parents=[shared])
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int, help="HTTP server processes (default: one per CPU)")
    serve.set_defaults(run=_serve)
