"""The registry commands: push, pull, versions (app.client's `Client` does the HTTP); the
curation commands (models, tags, aliases, delete, search, webhooks) are in app.cli.manage."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_OK, Parser, Progress, emit

if TYPE_CHECKING:
    from app.cli.common import Subcommands
    from app.client import Client


def server(args: argparse.Namespace) -> str:
    """The service's base URL: --url, else $PT2SERDE_URL, else the local default."""
    url: str = args.url or os.environ.get("PT2SERDE_URL", "http://127.0.0.1:8000")
    return url


def client(args: argparse.Namespace) -> Client:
    """The client of the command's service, with the token of --token, else $PT2SERDE_TOKEN."""
    from app.client import Client

    return Client(server(args), args.token or os.environ.get("PT2SERDE_TOKEN"))


def version_line(v: Any) -> str:
    """One version as a line of text."""
    aliases = f"  [{', '.join(v.aliases)}]" if v.aliases else ""
    gone = f"  deleted: {v.deleted_reason}" if v.deleted_at else ""
    return (
        f"{v.model} v{v.version}  schema {v.schema_version}  "
        f"{v.summary.parameter_count} params  program {v.digests.program[:16]}  "
        f"{state_text(v)}{aliases}{gone}"
    )


def state_text(v: Any) -> str:
    """How far a version was checked, in a few words."""
    state = v.verification
    if state.state == "unverified":
        return f"unverified: {', '.join(state.namespaces)}"
    return f"verified by torch {state.torch}" if state.torch else "verified"


class Transfer:
    """Bytes sent or received, as progress lines at most twice a second and at the end."""

    def __init__(self, args: argparse.Namespace, verb: str) -> None:
        self.args = args
        self.verb = verb
        self.progress: Progress | None = None
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if self.progress is None:
            self.progress = Progress(self.args, total)
        now = time.monotonic()
        if done != total and now - self.last < 0.5:
            return
        self.last = now
        of = f" of {total / 1e6:.1f} MB ({100 * done // total}%)" if total else " MB"
        self.progress.step(f"{self.verb} {done / 1e6:.1f}{of}")


def _push(args: argparse.Namespace) -> int:
    with client(args) as registry:
        pushed = registry.push(
            args.name,
            Path(args.input),
            model=args.model,
            parent=args.parent,
            progress=Transfer(args, "sent"),
        )
    verb = "pushed" if pushed.created else "already there:"
    emit(args, pushed.version.model_dump(mode="json"), f"{verb} {version_line(pushed.version)}")
    return EXIT_OK


def _pull(args: argparse.Namespace) -> int:
    with client(args) as registry:
        got = registry.pull(
            args.name, Path(args.dest), args.ref, progress=Transfer(args, "received")
        )
    emit(args, got.model_dump(mode="json"), f"wrote {args.dest}: {version_line(got)}")
    return EXIT_OK


def _versions(args: argparse.Namespace) -> int:
    with client(args) as registry:
        found = registry.versions(args.name, include_deleted=args.include_deleted)
    data = [v.model_dump(mode="json") for v in found]
    emit(args, data, "\n".join(version_line(v) for v in found) or "no versions")
    return EXIT_OK


def service_command(
    sub: Subcommands,
    shared: Parser,
    name: str,
    run: Callable[[argparse.Namespace], int],
    help_: str,
) -> argparse.ArgumentParser:
    """A subcommand that talks to a service: --url and --json."""
    cmd = sub.add_parser(name, help=help_, parents=[shared])
    cmd.add_argument("--url", help="the service (default $PT2SERDE_URL or 127.0.0.1:8000)")
    cmd.add_argument("--json", action="store_true", help="machine-readable output")
    cmd.set_defaults(run=run)
    return cmd


def model_command(
    sub: Subcommands,
    shared: Parser,
    name: str,
    run: Callable[[argparse.Namespace], int],
    help_: str,
) -> argparse.ArgumentParser:
    """A subcommand about one model of a service: its name, --url and --json."""
    cmd = service_command(sub, shared, name, run, help_)
    cmd.add_argument("name", help="the model name")
    return cmd


def register(sub: Subcommands, shared: Parser) -> None:
    """Add the registry commands."""
    push = model_command(sub, shared, "push", _push, "push a .pt2 as a new version of a model")
    push.add_argument("input", help="the .pt2 archive")
    push.add_argument("--model", help="which model of a multi-model archive")
    push.add_argument(
        "--parent",
        type=int,
        help="the version whose tensors this one's are stored as deltas of (default: latest)",
    )
    pull = model_command(
        sub, shared, "pull", _pull, "fetch a version's .pt2 (checked against its sha256)"
    )
    pull.add_argument("dest", help="where to write the .pt2")
    pull.add_argument("--ref", default="latest", help="a version number, an alias or latest")
    vers = model_command(sub, shared, "versions", _versions, "list a model's versions")
    vers.add_argument("--include-deleted", action="store_true")
