"""`pt2serde serve`: the HTTP service under uvicorn."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from app.cli.common import EXIT_OK, EXIT_USAGE, Parser
from app.settings import Settings

if TYPE_CHECKING:
    from app.cli.common import Subcommands


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.api.auth import startup_problem
    from app.api.protocol import PROTOCOL

    settings = Settings.from_env()
    refused = startup_problem(settings, args.host or settings.host)
    if refused is not None:
        sys.stderr.write(f"pt2serde: {refused}\n")
        return EXIT_USAGE
    uvicorn.run(
        "app.main:app",
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


def register(sub: Subcommands, shared: Parser) -> None:
    """Add `serve`."""
    serve = sub.add_parser("serve", help="run the HTTP service", parents=[shared])
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int, help="HTTP server processes (default: one per CPU)")
    serve.set_defaults(run=_serve)
