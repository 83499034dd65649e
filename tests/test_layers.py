"""Layering: the service and the CLI start without torch; torch lives in worker processes."""

from __future__ import annotations

import subprocess
import sys


def test_service_and_cli_start_without_torch() -> None:
    code = (
        "import sys, app.main, app.cli, app.operations, app.api.programs;"
        "print(sorted(m for m in ('torch', 'sympy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
