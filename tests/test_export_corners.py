"""Programs shaped like torch's own export tests go through every operation, as torch takes them.

The issue's three minimal cases (a range on a symbol the graph no longer uses; parameters no
input spec names; a tensor-subclass parameter torch pickles) and each class the corner
generator (`python -m tests.corners`) found: validated at levels semantic and torch, the
canonical form equal to torch's, deserialized in a torch worker, and torch.export.load of what
we wrote equal to torch.export.load of torch's own archive (state_dict, constants, ranges,
outputs, also through unflatten), its document the one torch.export.save writes for it;
through the library, the command and the service.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.export import ExportedProgram
from torch.testing._internal.two_tensor import TwoTensor

from app import operations as ops
from app.failure import Failure
from app.jobs import documents as jobs
from app.settings import Settings
from app.workers.torch import TorchPool
from tests.api.conftest import start_server, stop_server
from tests.conftest import ROOT
from tests.corners import programs as corners
from tests.corners.check import TorchOwn, document, same_program, through_us, torch_round_trip
from tests.corners.programs import Corner

SETTINGS = Settings()
OPTED_IN = Settings(allow_opaque_pickles=True)
PT2SERDE = Path(sys.executable).with_name("pt2serde")
ZIP = {"Content-Type": "application/zip"}


def _draw() -> dict[str, Corner]:
    """The minimal cases, one program of each class the generator found, and a module DAG."""
    torch.manual_seed(0)
    x2 = (torch.randn(2, 2),)
    x3 = (torch.randn(3),)
    dx = torch.export.Dim("dx", min=2, max=32)
    export = corners.export
    drawn = {
        "sequential-slice": export(
            "seq", "unused-weights", corners.SequentialSlice(4, 2), x2, strict=True
        ),
        "shared-layer": export("shared", "unused-weights", corners.SharedLayer(2), x2, strict=True),
        "buffer-two-paths": export(
            "paths", "unused-weights", corners.BufferTwoPaths(2), x2, strict=True
        ),
        "aliased-constants": export(
            "const", "aliased-constants", corners.AliasedConstants(3), x3, strict=False
        ),
        "aliased-buffers": export(
            "bufs", "aliased-buffers", corners.AliasedBuffers(3), x3, strict=True
        ),
        "unique": export(
            "unique", "unbacked-unique", corners.Unique(), (torch.tensor([3, 1, 3]),), strict=True
        ),
        "derived-dims": export(
            "derived",
            "derived-dims",
            corners.Derived(2),
            (torch.randn(4), torch.randn(6)),
            strict=False,
            dynamic_shapes=({0: dx + 1}, {0: 2 * dx}),
        ),
        "subclass-buffer": export(
            "subbuf", "tensor-subclass", corners.SubclassBuffer(3), x3, strict=True, pickled=True
        ),
        "preserved-dag": corners.preserved(random.Random(3), True, 0),
    }
    return {**corners.minimal(), **drawn}


@pytest.fixture(scope="module")
def exported() -> dict[str, Corner]:
    """Every program of this file, exported once."""
    return _draw()


@pytest.fixture(scope="module")
def saved(
    exported: dict[str, Corner], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, TorchOwn]]:
    """torch.export.save's archive of each program (as a file), and what torch makes of it."""
    folder = tmp_path_factory.mktemp("corners")
    out = {}
    for name, corner in exported.items():
        own = torch_round_trip(corner)
        path = folder / f"{name}.pt2"
        path.write_bytes(own.archive)
        out[name] = (path, own)
    return out


@pytest.fixture(scope="module")
def pool() -> Iterator[TorchPool]:
    """One torch worker pool for the file."""
    with TorchPool(SETTINGS) as workers:
        yield workers


def _round_trip(
    name: str,
    exported: dict[str, Corner],
    saved: dict[str, tuple[Path, TorchOwn]],
    pool: TorchPool,
    tmp_path: Path,
    settings: Settings = SETTINGS,
) -> ExportedProgram:
    archive, own = saved[name]
    target = tmp_path / "out.pt2"
    valid, built, why = through_us(archive, settings, pool, target)
    assert (valid, built, why) == (True, True, "")
    # what we wrote is what torch.export.save writes for the program torch loads
    assert document(target) == own.document
    ours = torch.export.load(target)
    same_program(ours, own.loaded, exported[name])
    return ours


def _findings(archive: Path, settings: Settings = SETTINGS) -> list[tuple[str, str]]:
    with ops.open_source(archive, "zip", settings) as source:
        report = ops.check(source, "semantic", settings)
    return [(f.code, f.severity) for f in report.findings]


# ---------------------------------------------------------------- the minimal cases


def test_a_range_torch_drops_is_a_warning_and_dropped(
    exported: dict[str, Corner],
    saved: dict[str, tuple[Path, TorchOwn]],
    pool: TorchPool,
    tmp_path: Path,
) -> None:
    archive, own = saved["item-view"]
    theirs = own.loaded
    written = document(archive)["range_constraints"]
    assert isinstance(written, dict)
    assert "u0" in written
    assert "u0" not in {str(k) for k in theirs.range_constraints}
    assert ("range-unknown-symbol", "warning") in _findings(archive)
    ours = _round_trip("item-view", exported, saved, pool, tmp_path)
    assert {str(k) for k in ours.range_constraints} == {str(k) for k in theirs.range_constraints}


def test_the_second_symbol_of_a_strict_nonzero(
    exported: dict[str, Corner],
    saved: dict[str, tuple[Path, TorchOwn]],
    pool: TorchPool,
    tmp_path: Path,
) -> None:
    archive, _ = saved["nonzero"]
    assert ("range-unknown-symbol", "warning") in _findings(archive)
    _round_trip("nonzero", exported, saved, pool, tmp_path)


def test_parameters_no_input_spec_names_are_carried(
    exported: dict[str, Corner],
    saved: dict[str, tuple[Path, TorchOwn]],
    pool: TorchPool,
    tmp_path: Path,
) -> None:
    archive, own = saved["module-list"]
    assert set(own.loaded.state_dict) == {
        "fcs.0.weight",
        "fcs.0.bias",
        "fcs.1.weight",
        "fcs.1.bias",
    }
    assert ("weight-unused", "warning") in _findings(archive)
    ours = _round_trip("module-list", exported, saved, pool, tmp_path)
    assert isinstance(ours.state_dict["fcs.1.weight"], torch.nn.Parameter)


def test_a_subclass_parameter_is_refused_by_default_by_validate_and_deserialize(
    saved: dict[str, tuple[Path, TorchOwn]], pool: TorchPool, tmp_path: Path
) -> None:
    archive, _ = saved["subclass"]
    target = tmp_path / "out.pt2"
    for level in ("semantic", "torch"):
        with ops.open_source(archive, "zip", SETTINGS) as source:
            report = jobs.validate(source, SETTINGS, level, pool)
        assert not report.valid
        assert [f.code for f in report.findings if f.severity == "error"] == ["unsafe-pickle"]
    with ops.open_source(archive, "zip", SETTINGS) as source, pytest.raises(Failure) as caught:
        jobs.deserialize_to(source, SETTINGS, pool, target)
    assert caught.value.code == "unsafe-pickle"
    assert not target.exists()


@pytest.mark.parametrize("name", ["subclass", "subclass-buffer"])
def test_subclass_tensors_are_carried_under_the_opt_in(
    name: str,
    exported: dict[str, Corner],
    saved: dict[str, tuple[Path, TorchOwn]],
    pool: TorchPool,
    tmp_path: Path,
) -> None:
    assert ("unsafe-pickle", "warning") in _findings(saved[name][0], OPTED_IN)
    ours = _round_trip(name, exported, saved, pool, tmp_path, OPTED_IN)
    subclassed = {**ours.state_dict, **ours.constants}
    assert any(isinstance(t, TwoTensor) for t in subclassed.values())


# ---------------------------------------------------------------- the classes the generator found


@pytest.mark.parametrize(
    "name",
    [
        "sequential-slice",
        "shared-layer",
        "buffer-two-paths",
        "aliased-constants",
        "aliased-buffers",
        "unique",
        "derived-dims",
        "preserved-dag",
    ],
)
def test_each_class_round_trips(
    name: str,
    exported: dict[str, Corner],
    saved: dict[str, tuple[Path, TorchOwn]],
    pool: TorchPool,
    tmp_path: Path,
) -> None:
    _round_trip(name, exported, saved, pool, tmp_path)


def test_derived_ranges_torch_keeps_are_kept(
    saved: dict[str, tuple[Path, TorchOwn]],
) -> None:
    # torch writes `s17 + 1` as a key, and the term as Add(Symbol('s17', ...), Integer(1))
    archive, own = saved["derived-dims"]
    theirs = own.loaded
    written = document(archive)["range_constraints"]
    assert isinstance(written, dict)
    assert len(written) == 3
    assert {str(k) for k in theirs.range_constraints} == set(written)
    assert not [f for f in _findings(archive) if f[0] == "range-unknown-symbol"]


# ---------------------------------------------------------------- through the command


def test_command_validates_and_deserializes_what_torch_saves(
    exported: dict[str, Corner], saved: dict[str, tuple[Path, TorchOwn]], tmp_path: Path
) -> None:
    archive, own = saved["module-list"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(PT2SERDE), *args]
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
        )

    for level in ("semantic", "torch"):
        done = cli("validate", str(archive), "--level", level, "--json")
        assert done.returncode == 0, (level, done.stdout, done.stderr)
        assert json.loads(done.stdout)["valid"], level
    done = cli("deserialize", str(archive), "-o", "out.pt2")
    assert done.returncode == 0, done.stderr
    same_program(torch.export.load(tmp_path / "out.pt2"), own.loaded, exported["module-list"])


# ---------------------------------------------------------------- through the service


def test_service_carries_them_where_opaque_pickles_are_allowed(
    exported: dict[str, Corner], saved: dict[str, tuple[Path, TorchOwn]]
) -> None:
    # every body spliced into its file and the answer spliced from the upload's members: the
    # pickled payload passes through the splicer as the other members do
    env = {
        "PT2SERDE_HTTP_WORKERS": "1",
        "PT2SERDE_WORKERS": "1",
        "PT2SERDE_DIRECT_BODY_BYTES": "1",
        "PT2SERDE_ALLOW_OPAQUE_PICKLES": "true",
    }
    server = start_server(env)
    try:
        with server.client() as client:
            for name in ("item-view", "module-list", "subclass"):
                archive, own = saved[name]
                data = archive.read_bytes()
                report = client.post(
                    "/v1/validate", params={"level": "torch"}, content=data, headers=ZIP
                )
                assert report.status_code == 200, report.text
                assert report.json()["valid"], name
                answer = client.post("/v1/deserialize", content=data, headers=ZIP)
                assert answer.status_code == 200, answer.text
                loaded = torch.export.load(io.BytesIO(answer.content))
                same_program(loaded, own.loaded, exported[name])
    finally:
        stop_server(server)
