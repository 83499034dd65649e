"""schemathesis against openapi.json on the live server: every phase, a bounded example count,
and hostile path parameters, multipart boundaries and Range headers mixed in (st_hooks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.api.conftest import Server
from tests.conftest import ROOT

#: Checks left out, and why:
#: - positive_data_acceptance: a schema-valid document can still be refused for its meaning
#:   (an undefined value, an unsafe expression): refusing it is correct;
#: and no response-time limit is asserted (--max-response-time is set far out of reach):
#: speed is measured by `make bench`, not by tests.
EXCLUDED = "positive_data_acceptance"


def test_schemathesis_finds_nothing(server: Server, tmp_path: Path) -> None:
    st = Path(sys.executable).with_name("st")
    result = subprocess.run(
        [
            str(st),
            "run",
            str(ROOT / "openapi.json"),
            "--url",
            server.url,
            "--max-examples",
            "12",
            "--phases",
            "examples,coverage,fuzzing",
            "--checks",
            "all",
            "--exclude-checks",
            EXCLUDED,
            # one worker: CPython 3.11's ast.parse (which hypothesis calls) is not thread-safe
            # ("AST constructor recursion depth mismatch")
            "--workers",
            "1",
            "--seed",
            "20261122",
            "--request-timeout",
            "120",
            "--max-response-time",
            "600",
            "--report-dir",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.api.st_hooks", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    tail = result.stdout[-6000:]
    assert result.returncode == 0, tail
    assert "No issues found" in result.stdout or " passed" in result.stdout, tail
