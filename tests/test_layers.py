"""Layering: the service and the CLI start without torch; torch lives in worker processes; the
import contract (`make lint`'s lint-imports) holds, and breaks when a forbidden import appears."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_service_and_cli_start_without_torch() -> None:
    code = (
        "import sys, app.main, app.cli, app.operations, app.api.programs;"
        "print(sorted(m for m in ('torch', 'sympy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter's contracts (pyproject's [tool.importlinter]) over the tree at `root`."""
    lint = Path(sys.executable).parent / "lint-imports"
    return subprocess.run(
        [str(lint), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_layering_contract_holds() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("schema/models.py", "import app.failure", "schema is the wire contract"),
        ("app/archive/zipread.py", "import app.bridge.exported", "archive, programs, tensors"),
        ("app/programs/digest.py", "import app.registry", "archive, programs, tensors"),
        ("app/tensors/views.py", "import app.jobs.output", "archive, programs, tensors"),
        ("app/http/ranges.py", "import app.api.deps", "the HTTP machinery (app.http)"),
        ("app/http/uploads.py", "import app.workers.pool", "the HTTP machinery (app.http)"),
        ("app/jobs/output.py", "import app.workers.pool", "the jobs that cross into a worker"),
        ("app/workers/pool.py", "import app.jobs.documents", "the worker pools are generic"),
        ("app/workers/runner.py", "import app.operations", "the worker pools are generic"),
        ("app/programs/canonical.py", "import torch", "only app.bridge imports torch"),
        ("app/jobs/torch.py", "import torch", "only app.bridge imports torch"),
        ("app/archive/raw.py", "import app.archive.writer", "no import cycles"),
    ],
)
def test_a_forbidden_import_breaks_the_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    sources = ("pt2serde", "schema", "app")
    for source in [path for package in sources for path in ROOT.glob(f"{package}/**/*.py")]:
        copy = tmp_path / source.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, copy)
    assert _lint_imports(tmp_path).returncode == 0
    with (tmp_path / module).open("a") as out:
        out.write(f"\n{line}\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = [row for row in result.stdout.splitlines() if " BROKEN" in row]
    # (an upward import is often a cycle too: then both contracts say so)
    assert [row for row in broken if row.startswith(contract)], broken
