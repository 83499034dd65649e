"""torch's door: every bridge module imports torch, the torch-free side never does; messages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from app.failure import is_allocation_failure, one_line

ROOT = Path(__file__).resolve().parents[2]


def test_the_torch_free_side_leaves_torch_alone() -> None:
    script = (
        "import sys\n"
        "import app.bridge, app.workers.torch, app.jobs.torch, app.jobs.output\n"
        "import app.tensors.views, app.tensors.safetensors_io, app.tensors.sources\n"
        "import app.programs.torch_check\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert app.workers.torch.TorchPool\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_bridge_module_imports_torch() -> None:
    """The package holds only torch's side of the door (its __init__ only a docstring)."""
    package = ROOT / "app" / "bridge"
    init = ast.parse((package / "__init__.py").read_text())
    assert [type(statement) for statement in init.body] == [ast.Expr]
    without = [
        path.name
        for path in sorted(package.glob("*.py"))
        if path.name != "__init__.py" and not _imports_torch(ast.parse(path.read_text()))
    ]
    assert without == []


def _imports_torch(module: ast.Module) -> bool:
    """Whether a module imports torch at its top level (not only inside a function)."""
    for statement in module.body:
        if isinstance(statement, ast.Import):
            names = [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0:
            names = [statement.module or ""]
        else:
            continue
        if any(name == "torch" or name.startswith("torch.") for name in names):
            return True
    return False


def test_messages_are_one_whole_line() -> None:
    assert one_line(ValueError("a\n  b\tc")) == "a b c"
    assert one_line(KeyError()) == "KeyError"
    assert one_line(RuntimeError("x" * 5000)) == "x" * 5000


def test_allocation_failures_are_recognised() -> None:
    assert is_allocation_failure(MemoryError())
    assert is_allocation_failure(
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
    )
    assert not is_allocation_failure(RuntimeError("shape mismatch"))
    assert not is_allocation_failure(ValueError("out of memory"))
