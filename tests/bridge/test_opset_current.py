"""The operator registry file is what the installed torch registers for a fresh program load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.zoo import ZooProgram, archive_bytes

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "app" / "programs" / "opset.json.gz"

#: A fresh process loads a program the way a consumer does, then writes the registry: what the
#: load registered on the way is in it, so equal bytes mean the file holds exactly that.
_SCRIPT = """
import sys, torch
torch.export.load(sys.argv[1])
from pathlib import Path
from app.bridge.opset_dump import dump
dump(Path(sys.argv[2]))
"""


def test_opset_file_is_current(zoo: dict[str, ZooProgram], tmp_path: Path) -> None:
    archive = tmp_path / "cond.pt2"
    archive.write_bytes(archive_bytes(zoo["cond"].ep))
    out = tmp_path / "opset.json.gz"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(archive), str(out)],
        check=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert out.read_bytes() == DATA.read_bytes(), "stale: run `make opset`"
