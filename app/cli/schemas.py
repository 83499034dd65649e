"""The schema commands: versions, describe, diff, compat."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import schema
from app import operations as ops
from app.cli.common import EXIT_INVALID, EXIT_OK, Parser, emit, print_json, source
from app.settings import Settings
from schema.diff import DescriptionLike

if TYPE_CHECKING:
    from app.cli.common import Subcommands


def _versions(args: argparse.Namespace) -> int:
    rows = schema.versions()
    data = [
        {"version": v.label, "torch_releases": list(v.torch_releases), "describable": v.describable}
        for v in rows
    ]
    lines = [
        f"{v.label:>6}  {', '.join(v.torch_releases)}"
        + ("" if v.describable else "  (not describable: describe and diff cover 8.x)")
        for v in rows
    ]
    emit(args, data, "\n".join(lines))
    return EXIT_OK


def _describe(args: argparse.Namespace) -> int:
    print_json(
        schema.describe(args.version) if not args.json_schema else schema.json_schema(args.version)
    )
    return EXIT_OK


def _description(text: str) -> DescriptionLike:
    """A version number, or the path of a schema.yaml (YAML or JSON)."""
    path = Path(text)
    if path.is_file():
        return schema.load_description(path.read_bytes())
    return text


def _diff(args: argparse.Namespace) -> int:
    old, new = _description(args.old), _description(args.new)
    result = schema.diff(old, new)
    verdict = schema.compatibility(old, new, args.mode) if args.mode else None
    if args.json:
        print_json(_diff_json(result, verdict))
    else:
        sys.stdout.write(schema.changelog(result))
        if verdict is not None:
            _write_verdict(verdict)
    return EXIT_OK if verdict is None or verdict.ok else EXIT_INVALID


def _diff_json(result: schema.SchemaDiff, verdict: schema.Verdict | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "old_version": result.old_version,
        "new_version": result.new_version,
        "required_bump": result.required_bump,
        "changes": [{**c.__dict__, "message": c.message} for c in result.changes],
    }
    if verdict is not None:
        data["verdict"] = {
            "ok": verdict.ok,
            "mode": str(verdict.mode),
            "violations": [c.message for c in verdict.violations],
            "numbers_follow_rules": verdict.numbers_follow_rules,
            "message": verdict.message,
        }
    return data


def _write_verdict(verdict: schema.Verdict) -> None:
    status = "holds" if verdict.ok else "FAILS"
    sys.stdout.write(f"\n{verdict.mode} {status}")
    sys.stdout.write(f": {len(verdict.violations)} violation(s)\n" if not verdict.ok else "\n")
    for c in verdict.violations:
        sys.stdout.write(f"- {c.message}\n")
    if not verdict.numbers_follow_rules:
        sys.stdout.write(f"version numbers: {verdict.message}\n")


def _compat(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with source(args, settings) as opened:
        result = ops.compat(opened, settings, args.model)
    lines = [
        f"needs schema >= {result.min_version}",
        f"readable by torch {', '.join(result.readable_by)}",
    ]
    lines += [f"torch {release} {why}" for release, why in result.read_ignoring]
    lines += [f"not by torch {release}: {why}" for release, why in result.not_readable_by]
    emit(args, result.__dict__, "\n".join(lines))
    return EXIT_OK


def register(sub: Subcommands, shared: Parser) -> None:
    """Add `schema` and its subcommands."""
    sch = sub.add_parser("schema", help="schema versions and descriptions", parents=[shared])
    sch_sub = sch.add_subparsers(dest="schema_command", required=True, parser_class=Parser)
    versions = sch_sub.add_parser(
        "versions", help="known schema versions and torch releases", parents=[shared]
    )
    versions.add_argument("--json", action="store_true")
    versions.set_defaults(run=_versions)
    describe = sch_sub.add_parser(
        "describe", help="describe a version (schema.yaml shape)", parents=[shared]
    )
    describe.add_argument("version")
    describe.add_argument("--json-schema", action="store_true", help="print the JSON Schema")
    describe.set_defaults(run=_describe)
    sdiff = sch_sub.add_parser(
        "diff",
        help="changes between two versions or schema.yaml files (exit 1 if MODE fails)",
        parents=[shared],
    )
    sdiff.add_argument("old", help="a version (8.7) or a schema.yaml path")
    sdiff.add_argument("new", help="a version (8.20) or a schema.yaml path")
    sdiff.add_argument(
        "--mode",
        type=str.upper,
        choices=[m.value for m in schema.Mode],
        help="check this compatibility mode",
    )
    sdiff.add_argument("--json", action="store_true", help="JSON instead of a markdown changelog")
    sdiff.set_defaults(run=_diff)
    scompat = sch_sub.add_parser(
        "compat", help="torch releases that can read a program", parents=[shared]
    )
    scompat.add_argument("input", help="a .pt2 archive or a JSON document")
    scompat.add_argument("--json", action="store_true")
    scompat.add_argument("--model")
    scompat.set_defaults(run=_compat)
