"""The registry's storage commands, run beside the service on its database and blob store
(settings from the PT2SERDE_* and AWS_* variables, as `serve` reads them): `registry gc`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from app.cli.common import EXIT_OK, Parser, emit

if TYPE_CHECKING:
    from app.cli.common import Subcommands


def _gc(args: argparse.Namespace) -> int:
    from app.registry.store import Registry
    from app.settings import Settings

    registry = Registry(Settings.from_env())
    try:
        report = registry.gc(dry_run=args.dry_run)
    finally:
        registry.close()
    verb = "would remove" if report.dry_run else "removed"
    human = (
        f"{verb} {len(report.objects)} objects ({report.freed_bytes} bytes), "
        f"{len(report.archives)} archive layouts, {len(report.strays)} strays, "
        f"{len(report.uploads)} unfinished uploads, {len(report.answers)} kept answers"
    )
    emit(args, report.model_dump(mode="json"), human)
    return EXIT_OK


def register(sub: Subcommands, shared: Parser) -> None:
    """Add `registry gc`."""
    group = sub.add_parser("registry", help="the registry's storage", parents=[shared])
    commands = group.add_subparsers(dest="registry_command", required=True, parser_class=Parser)
    gc = commands.add_parser(
        "gc",
        help="remove blob objects, unfinished uploads and kept answers no kept version needs "
        "(safe while pushes run)",
        parents=[shared],
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")
    gc.add_argument("--json", action="store_true", help="machine-readable output")
    gc.set_defaults(run=_gc)
