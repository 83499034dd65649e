"""What the command modules share: exit codes, the parser class, output, progress, sources."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from app import files
from app import operations as ops
from app.settings import Settings

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
#: A command needs an optional dependency (an extra) that is not installed.
EXIT_MISSING_EXTRA = 3
#: Inputs at least this large get progress lines on stderr (and any input with --progress).
PROGRESS_BYTES = 64 * 1024 * 1024


class Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line on a usage error."""

    def error(self, message: str) -> NoReturn:
        raise SystemExit(usage_error(message))


if TYPE_CHECKING:
    #: What a command group module registers its subcommands with.
    Subcommands = argparse._SubParsersAction[Parser]


def usage_error(message: str) -> int:
    """One usage-error line on stderr; the exit code to return."""
    sys.stderr.write(f"pt2serde: usage error: {message}\n")
    return EXIT_USAGE


def emit(args: argparse.Namespace, data: Any, human: str) -> None:
    """A command's result: JSON on stdout with --json, else the person's text."""
    if getattr(args, "json", False):
        print_json(data)
    else:
        sys.stdout.write(human.rstrip("\n") + "\n")


def print_json(data: Any) -> None:
    """Indented JSON on stdout."""
    sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")


class Progress:
    """Step lines on stderr with elapsed time, for large inputs or when asked."""

    def __init__(self, args: argparse.Namespace, size: int) -> None:
        self.on = bool(getattr(args, "progress", False)) or size >= PROGRESS_BYTES
        self.start = time.monotonic()

    def step(self, text: str) -> None:
        """One progress line, when progress is on."""
        if self.on:
            sys.stderr.write(f"[{time.monotonic() - self.start:7.2f}s] {text}\n")
            sys.stderr.flush()


def write_output(target: str, data: bytes) -> None:
    """Write an output file whole or not at all; '-' is stdout."""
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    files.write_atomic(Path(target), data)


@contextmanager
def source(args: argparse.Namespace, settings: Settings) -> Iterator[ops.Source]:
    """The command's input opened as a source, with progress lines about it."""
    path = Path(args.input)
    progress = Progress(args, path.stat().st_size)
    progress.step(f"opening {path} ({path.stat().st_size / 1e6:.1f} MB)")
    with ops.open_source(path, ops.media_of(path), settings) as opened:
        args.progress_log = progress
        yield opened
    progress.step("done")


def step(args: argparse.Namespace, text: str) -> None:
    """A progress line for the command's input, when progress is on."""
    progress: Progress | None = getattr(args, "progress_log", None)
    if progress is not None:
        progress.step(text)
