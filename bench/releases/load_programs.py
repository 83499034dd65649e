"""Load every exported program with the torch of the interpreter running this file.

Run as a script by each reader release's own venv (`<venv>/bin/python -I load_programs.py OUT
WORKDIR WRITER...`): standard library and torch only. For each program a writer saved, it runs
`torch.export.load`, then `.module()` and a call on the sample inputs (some failures only show
there), each in its own try/except, and appends one JSON line to OUT per program as soon as it is
known, so a timeout keeps what was done.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

#: What torch.export.load raises (2.9+) when both its archive reader and the legacy one failed;
#: the archive reader's error, which it logs, is the one that says why.
GENERIC = "We ran into an error when deserializing the saved file"
_NODE = re.compile(r"Failed deserializing node Node\(target='([^']*)'")


def _first_line(exc: BaseException, width: int) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else ""
    node = _NODE.match(line)
    if node:
        # the node's whole repr follows; its target says enough
        line = f"Failed deserializing node {node.group(1)}"
    elif len(line) > 160 and ". " in line:
        # torch's long messages say what failed in their first sentence, then give advice
        line = line.split(". ", 1)[0] + "."
    return f"{type(exc).__name__}: {line}"[:width]


def describe(exc: BaseException) -> str:
    """The exception's type and first line, and its root cause's where torch wrapped one (as a
    cause, or as an "Original exception" traceback inside the message)."""
    root = exc
    for _ in range(20):
        below = root.__cause__ or (None if root.__suppress_context__ else root.__context__)
        if below is None:
            break
        root = below
    outer = _first_line(exc, 160)
    if root is not exc:
        return f"{outer} <- {_first_line(root, 250)}"
    text = str(exc).strip()
    if "Original exception" in text:
        return f"{outer} <- {text.splitlines()[-1].strip()[:200]}"
    return _first_line(exc, 300)


class _Logged(logging.Handler):
    """Keeps the last exception torch logged (from 2.9 `torch.export.load` logs its archive
    reader's error, then tries the legacy format)."""

    def __init__(self) -> None:
        super().__init__()
        self.error: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Remember the record's exception, if it carries one (2.9 passes it as an argument)."""
        if record.exc_info and record.exc_info[1] is not None:
            self.error = record.exc_info[1]
        elif isinstance(record.args, tuple):
            self.error = next(
                (arg for arg in record.args if isinstance(arg, BaseException)), self.error
            )


_LOGGED = _Logged()


def try_program(archive: Path, inputs: Path) -> dict[str, Any]:
    """The first stage (load, module, run) that failed and its error, or none."""
    stage = "load"
    _LOGGED.error = None
    try:
        exported = torch.export.load(archive)
        stage = "module"
        module = exported.module()
        stage = "run"
        module(*torch.load(inputs, weights_only=True))
    except Exception as exc:  # every failure is the measurement
        logged = _LOGGED.error
        generic = stage == "load" and GENERIC in str(exc)
        cause = logged if generic and logged is not None else exc
        return {"stage": stage, "error": describe(cause)}
    return {"stage": None, "error": None}


def main(argv: list[str]) -> int:
    """Try every saved program of the writers named in argv[2:], under the workdir argv[1]."""
    out, workdir, writers = Path(argv[0]), Path(argv[1]), argv[2:]
    warnings.simplefilter("ignore")
    # torch's own logging setup keeps torch.export's records from propagating
    logging.getLogger("torch.export").addHandler(_LOGGED)
    with out.open("w") as lines:
        for writer in writers:
            manifest = json.loads((workdir / writer / "manifest.json").read_text())
            for program, entry in sorted(manifest["programs"].items()):
                if entry["status"] != "saved":
                    continue
                folder = workdir / writer
                found = try_program(folder / f"{program}.pt2", folder / f"{program}.inputs.pt")
                record = {"writer": writer, "program": program, **found}
                lines.write(json.dumps(record) + "\n")
                lines.flush()
                print(
                    f"{torch.__version__} <- {writer} {program}: {found['stage'] or 'ok'}",
                    file=sys.stderr,
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
