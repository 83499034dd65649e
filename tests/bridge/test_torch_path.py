"""The torch path's speed-ups keep its guarantees: mapped tensors hold the archive's bytes and
never write to it, a corrupt member still fails both torch jobs (and leaves no output), and the
CLI starts its worker before the check ends but sends it nothing the check refused."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch

import schema
from app import operations as ops
from app.archive import ArchiveFailure, open_archive
from app.bridge.checks import check_and_build
from app.bridge.exported import SerializedProgram, write_pt2
from app.cli import main
from app.jobs import torch as jobs
from app.jobs.output import durable
from app.tensors.sources import TensorSource
from app.tensors.views import MappedTensor
from app.workers import torch as torch_workers
from tests.zoo import ZooProgram, torch_json


def _source(path: Path) -> TensorSource:
    with open_archive(path) as archive:
        names = {name: name for name, entry in archive.tensors.items() if not entry.use_pickle}
    return TensorSource(archive=path, names=names)


@pytest.fixture
def bn_archive(archives: dict[str, bytes], tmp_path: Path) -> Path:
    """torch's archive of a program whose run mutates its buffers (batch norm in train mode)."""
    path = tmp_path / "bn.pt2"
    path.write_bytes(archives["linear_bn_train"])
    return path


@pytest.mark.parametrize("name", ["conv", "constants", "dtypes", "linear_bn_train"])
def test_mapped_tensors_hold_what_is_read(
    name: str, archives: dict[str, bytes], tmp_path: Path
) -> None:
    path = tmp_path / "program.pt2"
    path.write_bytes(archives[name])
    source = _source(path)
    read = source.read()
    with source.opened() as opened:
        assert opened.tensors.keys() == read.keys()
        for tensor_name, tensor in opened.tensors.items():
            assert isinstance(tensor, MappedTensor)
            assert bytes(tensor.data) == read[tensor_name].data
            assert (tensor.meta, tensor.kind) == (read[tensor_name].meta, read[tensor_name].kind)
        opened.verify()


def test_an_archive_given_as_bytes_is_read_not_mapped(archives: dict[str, bytes]) -> None:
    source = TensorSource(archive=archives["conv"], names={"fc.weight": "fc.weight"})
    with source.opened() as opened:
        assert opened.tensors == source.read()
        assert opened.archive is None


def test_torch_builds_on_the_mapping_without_writing_to_the_file(
    bn_archive: Path, zoo: dict[str, ZooProgram]
) -> None:
    before = bn_archive.read_bytes()
    source = _source(bn_archive)
    with open_archive(bn_archive) as archive:
        doc = schema.load(archive.documents["model"])
    with source.opened() as opened:
        built = check_and_build(doc, opened.tensors)
        assert built.program is not None
        program = zoo["linear_bn_train"]
        module = built.program.module()
        running = next(b for n, b in module.named_buffers() if n.endswith("running_mean"))
        was = running.clone()
        module(*program.args, **program.kwargs)
        assert not torch.equal(running, was)  # the run did write to its mapped buffer
    assert bn_archive.read_bytes() == before


def test_the_mapped_build_writes_what_the_read_one_does(
    bn_archive: Path, serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    doc = serialized["linear_bn_train"].doc
    mapped, read = tmp_path / "mapped.pt2", tmp_path / "read.pt2"
    jobs.job_deserialize_to_pt2(schema.dump(doc), _source(bn_archive), mapped)
    write_pt2(doc, _source(bn_archive).read(), read)
    assert mapped.read_bytes() == read.read_bytes()


def _corrupt(path: Path) -> None:
    """Flip a byte inside the first tensor member, keeping its declared CRC."""
    with open_archive(path) as archive:
        entry = next(e for e in archive.tensors.values() if e.size)
        offset = archive.reader.member(entry.member).data_offset
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_member_fails_both_jobs_and_leaves_no_output(
    bn_archive: Path, serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    _corrupt(bn_archive)
    document = schema.dump(serialized["linear_bn_train"].doc)
    with pytest.raises(ArchiveFailure) as checked:
        jobs.job_torch_check(document, _source(bn_archive))
    assert checked.value.code == "archive-crc-mismatch"
    target = tmp_path / "out.pt2"
    with pytest.raises(ArchiveFailure) as built:
        jobs.job_deserialize_to_pt2(document, _source(bn_archive), target)
    assert built.value.code == "archive-crc-mismatch"
    assert list(tmp_path.iterdir()) == [bn_archive]


class _Recorder:
    """Stands in for the torch pool: records when it starts and what it is sent, and runs the
    jobs here (this process has torch)."""

    events: list[str]

    def __init__(self, settings: Any, *, start_method: str) -> None:
        self.events.append("worker started")

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append("worker stopped")

    def submit(self, job: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        self.events.append(job.__name__)
        return job(*args)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What happened, in order: the worker's start and jobs, and the checks."""
    seen: list[str] = []
    monkeypatch.setattr(_Recorder, "events", seen, raising=False)
    monkeypatch.setattr(torch_workers, "TorchPool", _Recorder)
    for name in ("check", "buildable"):
        checked = getattr(ops, name)

        def wrapped(*args: Any, _name: str = name, _checked: Any = checked) -> Any:
            seen.append(f"{_name} started")
            return _checked(*args)

        monkeypatch.setattr(ops, name, wrapped)
    return seen


@pytest.fixture
def documents(zoo: dict[str, ZooProgram], tmp_path: Path) -> tuple[Path, Path]:
    """The conv program's document, and one semantic validation refuses (a node removed)."""
    good = tmp_path / "conv.json"
    good.write_bytes(torch_json(zoo["conv"].ep))
    broken = orjson.loads(good.read_bytes())
    broken["graph_module"]["graph"]["nodes"].pop(0)
    bad = tmp_path / "broken.json"
    bad.write_bytes(orjson.dumps(broken))
    return good, bad


def test_the_worker_starts_before_the_check_and_gets_only_what_passed(
    events: list[str], documents: tuple[Path, Path], archives: dict[str, bytes], tmp_path: Path
) -> None:
    good, bad = documents
    assert main(["validate", str(bad), "--level", "torch"]) == 1
    assert events == ["worker started", "check started", "worker stopped"]
    events.clear()
    assert main(["deserialize", str(bad), "-o", str(tmp_path / "no.pt2")]) == 1
    assert events == ["worker started", "buildable started", "worker stopped"]
    assert not (tmp_path / "no.pt2").exists()
    events.clear()
    archive = tmp_path / "conv.pt2"
    archive.write_bytes(archives["conv"])
    assert main(["validate", str(archive), "--level", "torch"]) == 0
    assert events == ["worker started", "check started", "job_torch_check", "worker stopped"]
    events.clear()
    assert main(["deserialize", str(archive), "-o", str(tmp_path / "out.pt2")]) == 0
    assert events == [
        "worker started",
        "buildable started",
        "job_deserialize_to_pt2",
        "worker stopped",
    ]
    assert torch.export.load(tmp_path / "out.pt2") is not None


def test_level_semantic_starts_no_worker(events: list[str], documents: tuple[Path, Path]) -> None:
    assert main(["validate", str(documents[0]), "--level", "semantic"]) == 0
    assert events == ["check started"]


def _write_half(target: Path) -> None:
    with durable(target) as out:
        out.write(b"half")
        raise RuntimeError("the writer stopped")


def test_the_output_is_written_in_place_and_removed_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    data = [bytes([i]) * 1000 for i in range(10)]
    with durable(target, step=2500) as out:  # the writeback starts several times on the way
        for chunk in data:
            out.write(chunk)
    assert target.read_bytes() == b"".join(data)
    with pytest.raises(RuntimeError):
        _write_half(target)
    assert not target.exists()


def test_a_deflated_member_is_read_whole_and_still_builds(
    archives: dict[str, bytes], serialized: dict[str, SerializedProgram], tmp_path: Path
) -> None:
    torch_wrote = tmp_path / "stored.pt2"
    torch_wrote.write_bytes(archives["conv"])
    deflated = tmp_path / "deflated.pt2"
    with zipfile.ZipFile(torch_wrote) as source, zipfile.ZipFile(deflated, "w") as out:
        for info in source.infolist():
            method = zipfile.ZIP_DEFLATED if "/data/weights/" in info.filename else 0
            out.writestr(info.filename, source.read(info), compress_type=method)
    source_tensors = _source(deflated)
    with source_tensors.opened() as opened:
        assert opened.tensors == source_tensors.read()  # every one read, none mapped
    target = tmp_path / "out.pt2"
    jobs.job_deserialize_to_pt2(schema.dump(serialized["conv"].doc), source_tensors, target)
    assert torch.export.load(target) is not None
