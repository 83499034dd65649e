"""Only proven bytes leave the registry: what it stores and serves is written by us, sample inputs
included only when torch's weights_only loader is proven to read them, and the archive digest,
the ETag and deduplication cover every byte served."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from torch.export.pt2_archive._package import load_pt2

from app.archive import RawTensor, open_archive, write_archive
from app.jobs.push import prepare
from app.jobs.runners import INLINE
from app.registry.errors import RegistryFailure
from app.registry.records import Pushed
from app.registry.store import Registry
from tests.archive.zipcraft import rezip
from tests.hostile import HOSTILE, SAMPLE_INPUT_PAYLOADS, consume, with_sample_inputs
from tests.registry.conftest import (
    Backend,
    assert_served,
    sample_inputs_of,
    stored_files,
)
from tests.zoo import ZooProgram, outputs_close

DROPPED = "sample-inputs-dropped"
PAYLOADS = sorted(SAMPLE_INPUT_PAYLOADS)


def push_model(registry: Registry, name: str, archive: bytes, model: str | None) -> Pushed:
    """Stage, vet and push one model of an upload as the route does."""
    staged = registry.blobs.stage_bytes(archive)
    try:
        candidate = prepare(registry, staged.path, INLINE, INLINE, model)
    finally:
        staged.discard()
    return registry.push(name, candidate)


def push(registry: Registry, name: str, archive: bytes) -> Pushed:
    """Stage, vet and push an upload's only model."""
    return push_model(registry, name, archive, None)


def served(registry: Registry, pushed: Pushed) -> bytes:
    """The bytes the registry serves for a pushed version, checked against its digest."""
    info = pushed.version
    _, handle = registry.open_content(info.model, str(info.version), "archive")
    with handle:
        data = handle.read()
    assert hashlib.sha256(data).hexdigest() == info.digests.archive
    assert len(data) == info.archive_size
    return data


def poisoned(archive: bytes, payload: str, marker: Path) -> bytes:
    return with_sample_inputs(archive, SAMPLE_INPUT_PAYLOADS[payload](marker))


@pytest.fixture(scope="module")
def sqlite_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry (SQLite) shared by this module's consumer tests (torch runs in a subprocess)."""
    backend = Backend("sqlite", tmp_path_factory.mktemp("served") / "data")
    opened = Registry(backend.settings())
    try:
        yield opened
    finally:
        opened.close()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_unproven_sample_inputs_are_left_out_and_nothing_runs(
    payload: str,
    sqlite_registry: Registry,
    archives: dict[str, bytes],
    zoo: dict[str, ZooProgram],
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    upload = poisoned(archives["conv"], payload, marker)
    program = zoo["conv"]
    # the payload is live: a trusting consumer of the upload itself runs it
    assert consume(upload, program.args, program.kwargs, tmp_path / "upload").events
    assert marker.exists()
    marker.unlink()

    pushed = push(sqlite_registry, f"poisoned-{payload}", upload)
    assert pushed.created
    assert [(w.code, w.severity) for w in pushed.warnings] == [(DROPPED, "warning")]
    assert "archive/data/sample_inputs/model.pt" in pushed.warnings[0].message
    data = served(sqlite_registry, pushed)
    assert_served(data, upload, samples=False)
    consumed = consume(data, program.args, program.kwargs, tmp_path / "served")
    assert (consumed.events, consumed.error) == ([], None)
    assert not marker.exists()
    assert outputs_close(consumed.outputs, program.run())


def test_proven_sample_inputs_are_kept_and_served(
    sqlite_registry: Registry,
    archives: dict[str, bytes],
    zoo: dict[str, ZooProgram],
    tmp_path: Path,
) -> None:
    program = zoo["conv"]
    pushed = push(sqlite_registry, "clean", archives["conv"])
    assert (pushed.created, pushed.warnings) == (True, [])
    data = served(sqlite_registry, pushed)
    assert sample_inputs_of(archives["conv"])  # torch saved the example inputs
    assert_served(data, archives["conv"], samples=True)
    consumed = consume(data, program.args, program.kwargs, tmp_path)
    assert (consumed.events, consumed.error) == ([], None)
    assert outputs_close(consumed.outputs, program.run())
    assert outputs_close(consumed.example_inputs, (program.args, program.kwargs))


def test_clean_after_poisoned_is_the_same_version_and_serves_no_unproven_byte(
    registry: Registry, archives: dict[str, bytes], backend: Backend, tmp_path: Path
) -> None:
    clean = archives["conv"]
    evil = poisoned(clean, "reduce-os-system", tmp_path / "marker")
    first = push(registry, "m", evil)
    again = push(registry, "m", clean)
    assert (first.created, again.created) == (True, False)
    assert again.version == first.version
    assert again.warnings == []
    data = served(registry, again)
    assert_served(data, clean, samples=False)
    # the other order: the clean upload's proven sample inputs are served, the poisoned
    # upload answers the same version (with its warning) and changes nothing served
    kept = push(registry, "n", clean)
    later = push(registry, "n", evil)
    assert (later.created, later.version) == (False, kept.version)
    assert [w.code for w in later.warnings] == [DROPPED]
    assert served(registry, later) == served(registry, kept)
    assert_served(served(registry, kept), clean, samples=True)
    assert kept.version.digests.archive != first.version.digests.archive
    assert kept.version.digests.program == first.version.digests.program
    assert stored_files(backend)["staged"] == []


def test_decoy_is_never_served(
    registry: Registry, archives: dict[str, bytes], tmp_path: Path
) -> None:
    """Fails until the exact pickle machine replaces the heuristic that reads the decoy as
    torch._utils._rebuild_tensor_v2: the decoy must then be left out like any unproven pickle."""
    upload = poisoned(archives["conv"], "decoy-stack-global", tmp_path / "marker")
    pushed = push(registry, "decoy", upload)
    assert [w.code for w in pushed.warnings] == [DROPPED]
    assert sample_inputs_of(served(registry, pushed)) == b""


def test_equivalent_uploads_give_the_same_served_bytes(
    sqlite_registry: Registry, archives: dict[str, bytes]
) -> None:
    """The served bytes are a function of the checked program: torch's archive, the same
    members rezipped by python, and the archive we serve pushed back all serve one archive."""
    first = push(sqlite_registry, "same", archives["dynamic"])
    data = served(sqlite_registry, first)
    for upload in (rezip(archives["dynamic"]), data):
        again = push(sqlite_registry, "same-again", upload)
        assert served(sqlite_registry, again) == data
        assert again.version.digests == first.version.digests


def test_pickle_payloads_are_never_stored_even_where_opaque_pickles_are_allowed(
    backend: Backend, archives: dict[str, bytes], tmp_path: Path
) -> None:

    [pickled_weight] = [h for h in HOSTILE if h.name == "use-pickle-weight"]
    lenient = Registry(backend.settings(allow_opaque_pickles=True))
    try:
        data = pickled_weight.build(archives, tmp_path / "marker")
        with pytest.raises(RegistryFailure) as caught:
            push(lenient, "opaque", data)
        assert caught.value.code == "unsafe-pickle"
        assert stored_files(backend) == {"blobs": [], "staged": []}
    finally:
        lenient.close()


def test_one_model_of_several_is_served_alone_with_the_extra_files(
    sqlite_registry: Registry, archives: dict[str, bytes], zoo: dict[str, ZooProgram]
) -> None:
    """A push names one model of an archive: the served archive holds that model alone, its
    tensors named as a single model's are, and the archive's extra files (text torch hands back
    on request, never unpickled)."""
    documents: dict[str, bytes] = {}
    tensors: list[RawTensor] = []
    for name in ("conv", "multi_out"):
        with open_archive(archives[name]) as archive:
            documents[name] = archive.documents["model"]
            tensors += [replace(t, name=f"{name}/{t.name}") for t in archive.raw_tensors()]
    both = io.BytesIO()
    write_archive(both, documents, tensors, opaque_members={"extra/notes.txt": b"hello"})
    pushed = push_model(sqlite_registry, "picked", both.getvalue(), "multi_out")
    assert (pushed.version.archive_model, pushed.warnings) == ("multi_out", [])
    data = served(sqlite_registry, pushed)
    with open_archive(data) as out, open_archive(archives["multi_out"]) as alone:
        assert list(out.documents) == ["multi_out"]
        assert out.documents["multi_out"] == alone.documents["model"]
        assert [(t.name, t.data) for t in out.raw_tensors()] == [
            (t.name, t.data) for t in alone.raw_tensors()
        ]
        assert out.opaque_members(1024) == {
            "data/sample_inputs/multi_out.pt": b"",
            "extra/notes.txt": b"hello",
        }
    # torch.export.load picks the model named "model"; torch's package loader reads any name
    # (in this process: the archive is ours, and its sample inputs are empty)
    program = zoo["multi_out"]
    loaded = load_pt2(io.BytesIO(data)).exported_programs["multi_out"]
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())
