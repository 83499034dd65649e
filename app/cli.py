"""The `pt2serde` command. Exit codes: 0 ok, 1 invalid input, 2 usage error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import orjson

import schema
from app.failure import Failure
from app.settings import Settings

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line on a usage error."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"pt2serde: usage error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _emit(args: argparse.Namespace, data: Any, human: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(human.rstrip("\n") + "\n")


def _schema_versions(args: argparse.Namespace) -> int:
    rows = schema.versions()
    data = [
        {"version": v.label, "torch_releases": list(v.torch_releases), "describable": v.describable}
        for v in rows
    ]
    lines = [f"{v.label:>6}  {', '.join(v.torch_releases)}" for v in rows]
    _emit(args, data, "\n".join(lines))
    return EXIT_OK


def _schema_describe(args: argparse.Namespace) -> int:
    out = (
        schema.describe(args.version) if not args.json_schema else schema.json_schema(args.version)
    )
    sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = Settings.from_env()
    uvicorn.run(
        "app.main:app",
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_level="info",
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="pt2serde", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(run=_serve)

    sch = sub.add_parser("schema", help="schema versions and descriptions")
    sch_sub = sch.add_subparsers(dest="schema_command", required=True, parser_class=_Parser)
    versions = sch_sub.add_parser("versions", help="known schema versions and torch releases")
    versions.add_argument("--json", action="store_true")
    versions.set_defaults(run=_schema_versions)
    describe = sch_sub.add_parser("describe", help="describe a version (schema.yaml shape)")
    describe.add_argument("version")
    describe.add_argument("--json-schema", action="store_true", help="print the JSON Schema")
    describe.set_defaults(run=_schema_describe)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run one subcommand, print one clear line on failure."""
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except (Failure, schema.SchemaError) as exc:
        code = getattr(exc, "code", "error")
        message = exc.message if isinstance(exc, Failure) else str(exc)
        sys.stderr.write(f"pt2serde: {code}: {message}\n")
        return EXIT_INVALID
    except OSError as exc:
        sys.stderr.write(f"pt2serde: io-error: {exc.strerror or exc}: {exc.filename or ''}\n")
        return EXIT_INVALID


if __name__ == "__main__":
    raise SystemExit(main())
