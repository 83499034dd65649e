"""The `pt2serde` command: `DESCRIPTION` is what `pt2serde --help` says to its user.

Each command group is a module with a `register(sub, shared)` that adds its subcommands; a new
group is one module added to `GROUPS`. Help texts are for the user: a note for developers goes in
a comment or in docs/ (tests/cli/test_help.py checks every --help).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Sequence

import app
import schema
from app.cli import admin, manage, programs, registry, schemas, serve, storage
from app.cli.common import (
    EXIT_INVALID,
    EXIT_MISSING_EXTRA,
    EXIT_OK,
    EXIT_USAGE,
    PROGRESS_BYTES,
    Parser,
    print_json,
)
from app.failure import Failure

__all__ = ["EXIT_INVALID", "EXIT_MISSING_EXTRA", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

#: The command group modules, in the order `pt2serde --help` lists them.
GROUPS = (serve, programs, registry, manage, schemas, admin, storage)

DESCRIPTION = """\
Check, convert, compare and store PyTorch exported programs (.pt2 archives and their JSON
documents) without unpickling or running what they hold.

The document commands need only the base install; deserialize and validate --level torch need
pt2serde[torch], serve and the registry commands pt2serde[server].
Most commands take --json for machine-readable output. Exit codes: 0 ok, 1 invalid input,
2 usage error, 3 an extra is missing. `pt2serde COMMAND --help` lists a command's options."""


def version() -> str:
    """What `pt2serde --version` prints: the installed distribution and the schema it writes."""
    return (
        f"pt2serde {app.version()} "
        f"(writes torch export schema {schema.format_version(schema.CURRENT)})"
    )


class _Version(argparse.Action):
    """--version, looked up only when asked (every other command would pay the metadata scan)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(version() + "\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = Parser(
        prog="pt2serde",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the version and the schema it writes"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    # every command takes --progress (those with nothing long to report accept and ignore it)
    shared = Parser(add_help=False)
    shared.add_argument(
        "--progress",
        action="store_true",
        help=f"progress lines on stderr (on by itself for inputs over {PROGRESS_BYTES >> 20} MB)",
    )
    shared.add_argument(
        "--token", help="the registry's API token (default $PT2SERDE_TOKEN, which ps cannot show)"
    )
    for group in GROUPS:
        group.register(sub, shared)
    return parser


#: The extra that installs each optional top-level module the commands import.
_EXTRA_OF: dict[str, str] = {
    "torch": "torch",
    **dict.fromkeys(
        ("fastapi", "starlette", "uvicorn", "multipart", "sqlalchemy", "alembic", "psycopg"),
        "server",
    ),
}


def _missing_extra(command: str, module: str) -> int:
    extra = _EXTRA_OF[module]
    sys.stderr.write(
        f"pt2serde: missing-extra: {command} needs {module}, which is not installed: "
        f"pip install 'pt2serde[{extra}]'\n"
    )
    return EXIT_MISSING_EXTRA


def _torch_command(args: argparse.Namespace) -> str | None:
    """The command line, when it runs torch (in a worker, so a missing torch shows up late)."""
    if args.command == "deserialize":
        return "deserialize"
    if args.command == "validate" and args.level == "torch":
        return "validate --level torch"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run one subcommand, print one clear line on failure."""
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    torch_command = _torch_command(args)
    if torch_command is not None and importlib.util.find_spec("torch") is None:
        return _missing_extra(torch_command, "torch")
    try:
        return run(args)
    except ModuleNotFoundError as exc:
        module = (exc.name or "").partition(".")[0]
        if module not in _EXTRA_OF:
            raise
        return _missing_extra(args.command, module)
    except (Failure, schema.SchemaError) as exc:
        code = getattr(exc, "code", "error")
        message = exc.message if isinstance(exc, Failure) else str(exc)
        _fail(args, code, message, list(getattr(exc, "issues", None) or []))
    except OSError as exc:
        _fail(args, "io-error", f"{exc.strerror or exc}: {exc.filename or ''}", [])
    return EXIT_INVALID


#: How many of a failure's issues the text output lists (--json gives them all).
SHOWN_ISSUES = 5


def _fail(args: argparse.Namespace, code: str, message: str, issues: list[schema.Issue]) -> None:
    """A failure: one line on stderr and its first issues; with --json, also the whole problem
    (the HTTP problem's code, detail and errors) on stdout, where a script reads results."""
    if getattr(args, "json", False):
        problem = {
            "code": code,
            "detail": message,
            "errors": [{"code": i.code, "path": i.path, "message": i.message} for i in issues],
        }
        print_json(problem)
    lines = [f"pt2serde: {code}: {message}"]
    lines += [f"  {i.code}  {i.path or '/'}  {i.message}" for i in issues[:SHOWN_ISSUES]]
    if len(issues) > SHOWN_ISSUES:
        lines.append(f"  ... and {len(issues) - SHOWN_ISSUES} more (--json lists them all)")
    sys.stderr.write("\n".join(lines) + "\n")
