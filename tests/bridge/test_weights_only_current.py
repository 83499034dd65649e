"""`app/archive/weights_only_globals.json` is what the installed torch's weights_only rules are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
import torch._weights_only_unpickler as weights_only

from app.archive.pickles import rules

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "app" / "archive" / "weights_only_globals.json"


def test_the_rules_file_is_what_the_installed_torch_writes(tmp_path: Path) -> None:
    # a fresh interpreter: the user-allowed globals depend on what the process has imported
    out = tmp_path / "rules.json"
    subprocess.run(
        [sys.executable, "-m", "app.bridge.weights_only_dump", str(out)],
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    assert out.read_bytes() == DATA.read_bytes(), (
        "stale: run python -m app.bridge.weights_only_dump app/archive/weights_only_globals.json"
    )


def test_our_allowlist_is_torchs() -> None:
    assert set(rules().allowed) == set(weights_only._get_allowed_globals())
    assert rules().blocked_modules == set(weights_only._blocklisted_modules)
    assert torch.__version__.startswith("2.13.")
