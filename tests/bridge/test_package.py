"""The bridge package without torch: import hygiene, lazy attributes, messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import app.bridge
from app.bridge import exported
from app.bridge.errors import is_allocation_failure, one_line
from app.bridge.exported import SerializedProgram

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_bridge_leaves_torch_alone() -> None:
    script = (
        "import sys\n"
        "import app.bridge, app.workers.torch, app.bridge.jobs, app.bridge.safetensors_io\n"
        "import app.bridge.tensors, app.bridge.sources\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert callable(app.bridge.to_safetensors) and app.workers.torch.TorchPool\n"
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


def test_torch_attributes_are_lazy_but_real() -> None:
    assert app.bridge.serialize is exported.serialize
    assert app.bridge.write_pt2 is exported.write_pt2
    assert app.bridge.SerializedProgram is SerializedProgram
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        app.bridge.nothing  # noqa: B018


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
