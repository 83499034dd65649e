"""An audit hook that records every code-running or importing event of this process to a file.

Installed on import when the environment variable `AUDIT_DIR_ENV` names a directory; the server
wrapper (tests.fuzz.audited_server) imports it, and so do torch workers through
PT2SERDE_WORKER_IMPORTS. Each process appends JSON lines `[event, first argument]` to its own
`events-<pid>.jsonl`, so the test can read what every process did after a point in time.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

import orjson

AUDIT_DIR_ENV = "PT2SERDE_TEST_AUDIT_DIR"
#: Event name prefixes that mean code is being run, compiled, imported, unpickled or spawned.
AUDITED = (
    "pickle.find_class",
    "exec",
    "compile",
    "import",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "subprocess.Popen",
    "ctypes.dlopen",
)
_SUMMARY_CHARS = 200


def summary(value: Any) -> str:
    """A stable one-line text of an audit argument (code objects by file and name, no address)."""
    if isinstance(value, types.CodeType):
        return f"<code {value.co_filename}:{value.co_name}>"
    if isinstance(value, str):
        return value[:_SUMMARY_CHARS]
    if isinstance(value, bytes | bytearray):
        return repr(bytes(value[:_SUMMARY_CHARS]))
    return f"<{type(value).__name__}>"


def install(folder: Path) -> None:
    """Record this process's audited events into `folder/events-<pid>.jsonl` from now on."""
    fd = os.open(
        folder / f"events-{os.getpid()}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not event.startswith(AUDITED):
            return
        first = summary(args[0]) if args else ""
        # one O_APPEND write per line: lines of concurrent threads never interleave
        os.write(fd, orjson.dumps([event, first]) + b"\n")

    sys.addaudithook(hook)


def read_events(folder: Path) -> dict[str, list[tuple[str, str]]]:
    """Every process's recorded events so far, by file name."""
    events: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(folder.glob("events-*.jsonl")):
        # a line still being written has no newline yet: it is read next time
        lines = path.read_bytes().split(b"\n")[:-1]
        events[path.name] = [(str(e), str(a)) for e, a in map(orjson.loads, lines)]
    return events


_FOLDER = os.environ.get(AUDIT_DIR_ENV)
if _FOLDER:
    install(Path(_FOLDER))
