"""The installed release's rules file is what that torch registers, writes and reads today."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import torch
import torch._weights_only_unpickler as weights_only
from torch._export.serde.schema import SCHEMA_VERSION

from app.archive.pickles import rules as pickle_rules
from app.releases import installed
from app.releases.generate import DUMP, data_file

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_release_file_is_regenerated_byte_for_byte(tmp_path: Path) -> None:
    # the dump exports and probes a program, then reads the registry in a fresh process that has
    # only loaded it: what a consumer's process holds when it reads a program
    out = tmp_path / "rules.json.gz"
    subprocess.run([sys.executable, str(DUMP), str(out)], check=True, cwd=tmp_path, timeout=600)
    shipped = data_file(installed().release)
    assert json.loads(gzip.decompress(out.read_bytes())) == json.loads(
        gzip.decompress(shipped.read_bytes())
    ), "stale: run `make releases-rules`"
    assert out.read_bytes() == shipped.read_bytes()


def test_the_installed_rules_are_this_torchs() -> None:
    assert torch.__version__.split("+")[0] == installed().release
    assert installed().torch == torch.__version__
    assert installed().schema_version == SCHEMA_VERSION
    assert installed().unknown_keys == "skip"
    assert set(pickle_rules().allowed) == set(weights_only._get_allowed_globals())
    assert pickle_rules().blocked_modules == set(weights_only._blocklisted_modules)


def test_every_overload_in_the_rules_is_one_this_torch_registers() -> None:
    # this process registers more as tests export programs (inductor's prims); never fewer
    registered = {
        (s.name, s.overload_name or "default") for s in torch._C._jit_get_all_schemas()
    } | {
        (name, overload or "default")
        for name, _, overload in (q.partition(".") for q in torch._C._dispatch_get_all_op_names())
    }
    ours = {(f"{op.namespace}::{op.name}", op.overload) for op in installed().schemas()}
    assert len(ours) == 4415
    assert sorted(ours - registered) == []
