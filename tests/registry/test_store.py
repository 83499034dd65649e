"""The registry as a library on SQLite and PostgreSQL: versions, dedupe, refs, blobs, cleanup."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import schema
from app import operations as ops
from app.jobs.push import prepare
from app.jobs.runners import INLINE
from app.registry.blobs import BlobStore
from app.registry.blobs.local import LocalObjects
from app.registry.blobs.s3 import S3Objects
from app.registry.db import MIGRATIONS, metadata
from app.registry.errors import RegistryFailure
from app.registry.ingest import Candidate
from app.registry.records import Pushed, VersionInfo
from app.registry.store import Registry
from app.registry.summary import ValueSummary
from tests.progs.test_tied_weights import TiedLM
from tests.registry.conftest import (
    Backend,
    assert_served,
    objects_of,
    stored_files,
    variant,
)
from tests.zoo import ZooProgram, archive_bytes


def push(registry: Registry, name: str, archive: bytes, model: str | None = None) -> Pushed:
    """Stage, prepare and push an archive as the route does."""
    staged = registry.blobs.stage_bytes(archive)
    try:
        candidate = prepare(registry, staged.path, INLINE, INLINE, model)
    finally:
        staged.discard()
    return registry.push(name, candidate)


def read_archive(registry: Registry, name: str, ref: str) -> bytes:
    """The archive a version serves."""
    _, handle = registry.open_content(name, ref, "archive")
    with handle:
        return handle.read()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def failure(code: str) -> pytest.RaisesExc[RegistryFailure]:
    return pytest.raises(RegistryFailure, check=lambda e: e.code == code)


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def test_migrations_create_exactly_the_tables(registry: Registry) -> None:
    with registry.db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        version = MigrationContext.configure(conn).get_current_revision()
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert version == head
    assert head == sorted(p.stem.split("_")[0] for p in MIGRATIONS.glob("versions/0*.py"))[-1]
    # a second open (another process) finds the schema current and changes nothing
    Registry(registry.settings).close()


def test_push_numbers_versions_and_dedupes(
    registry: Registry, archives: dict[str, bytes], backend: Backend
) -> None:
    first = push(registry, "vision", archives["conv"])
    assert (first.created, first.version.version) == (True, 1)
    again = push(registry, "vision", archives["conv"])
    assert (again.created, again.version) == (False, first.version)
    second = push(registry, "vision", archives["linear_bn_train"])
    assert (second.created, second.version.version) == (True, 2)
    other = push(registry, "vision-copy", archives["conv"])
    assert (other.created, other.version.version) == (True, 1)
    assert other.version.digests == first.version.digests
    # each archive and each canonical document stored once, across models
    conv, lbt = first.version.digests, second.version.digests
    expected = objects_of(registry, conv.archive, conv.graph)
    expected |= objects_of(registry, lbt.archive, lbt.graph)
    assert stored_files(backend) == {"blobs": sorted(expected), "staged": []}
    served = read_archive(registry, "vision", "1")
    assert sha256(served) == conv.archive
    assert first.version.archive_size == len(served)
    assert_served(served, archives["conv"])


def test_version_metadata(
    registry: Registry, archives: dict[str, bytes], zoo: dict[str, ZooProgram]
) -> None:
    info = push(registry, "vision", archives["conv"]).version
    with ops.open_source(archives["conv"], "zip", registry.settings) as source:
        canonical = ops.canonical(source, registry.settings)
        document = ops.read_document(source, None, registry.settings).doc
    compat = schema.compat(document)
    assert info.digests.model_dump() == {
        "program": canonical.digests.program,
        "graph": canonical.digests.graph,
        "weights": canonical.digests.weights,
        "archive": sha256(read_archive(registry, "vision", "1")),
    }
    size = len(read_archive(registry, "vision", "1"))
    assert (info.archive_size, info.archive_model) == (size, "model")
    assert info.schema_version == "8.20"
    assert (info.min_schema_version, info.readable_by) == (compat.min_version, compat.readable_by)
    assert "2.13.0" in info.readable_by
    program = zoo["conv"]
    (x,) = program.args
    out = program.run()
    # dtypes are named as torch spells them ("float32" for torch.float32)
    assert info.summary.inputs == [
        ValueSummary(name="x", kind="as_tensor", dtype=str(x.dtype)[6:], shape=list(x.shape))
    ]
    assert [(o.kind, o.dtype, o.shape) for o in info.summary.outputs] == [
        ("as_tensor", str(out.dtype)[6:], list(out.shape))
    ]
    assert info.summary.parameter_count == sum(p.numel() for p in program.ep.parameters())
    assert info.summary.parameters == len(list(program.ep.parameters()))
    assert (info.tags, info.aliases, info.deleted_at) == ({}, [], None)


def test_dynamic_shapes_are_summarized_as_expressions(
    registry: Registry, archives: dict[str, bytes], zoo: dict[str, ZooProgram]
) -> None:
    info = push(registry, "dyn", archives["dynamic"]).version
    ep = zoo["dynamic"].ep
    nodes = {n.name: n for n in ep.graph.nodes}

    def shape(name: str) -> list[int | str]:
        return [d if isinstance(d, int) else str(d) for d in nodes[name].meta["val"].shape]

    assert [(i.name, i.shape) for i in info.summary.inputs] == [
        (name, shape(name)) for name in ep.graph_signature.user_inputs
    ]
    assert [(o.name, o.shape) for o in info.summary.outputs] == [
        (name, shape(name)) for name in ep.graph_signature.user_outputs
    ]
    assert all(isinstance(d, str) for d in info.summary.inputs[0].shape or [])


def test_refs_aliases_and_tags(registry: Registry, archives: dict[str, bytes]) -> None:
    push(registry, "m", archives["conv"])
    push(registry, "m", archives["linear_bn_train"])
    assert registry.version("m", "latest").version == 2
    registry.set_alias("m", "champion", 1)
    registry.set_alias("m", "staging", 2)
    assert registry.version("m", "champion").version == 1
    moved = registry.set_alias("m", "champion", 2)
    assert (moved.alias, moved.version) == ("champion", 2)
    assert registry.version("m", "2").aliases == ["champion", "staging"]
    assert registry.model("m").aliases == {"champion": 2, "staging": 2}
    tagged = registry.set_tag("m", "champion", "team", "vision")
    tagged = registry.set_tag("m", "2", "stage", "prod")
    assert tagged.tags == {"stage": "prod", "team": "vision"}
    assert registry.delete_tag("m", "2", "team").tags == {"stage": "prod"}
    registry.delete_alias("m", "staging")
    assert registry.model("m").aliases == {"champion": 2}
    with failure("alias-not-found"):
        registry.version("m", "staging")
    with failure("alias-not-found"):
        registry.delete_alias("m", "staging")
    with failure("version-not-found"):
        registry.version("m", "3")
    with failure("version-not-found"):
        registry.set_alias("m", "champion", 7)
    with failure("model-not-found"):
        registry.version("nope", "1")
    with failure("tag-not-found"):
        registry.delete_tag("m", "2", "team")
    with failure("invalid-name"):
        registry.set_alias("m", "latest", 1)
    with failure("invalid-name"):
        registry.set_alias("m", "1st", 1)
    with failure("invalid-name"):
        registry.version("../etc", "1")
    with failure("invalid-name"):
        registry.set_tag("m", "1", "bad key", "x")


def test_delete_is_soft_and_collects_blobs_when_unreferenced(
    registry: Registry, archives: dict[str, bytes], backend: Backend
) -> None:
    a = push(registry, "a", archives["conv"]).version
    push(registry, "b", archives["conv"])
    registry.set_alias("a", "champion", 1)
    deleted = registry.delete_version("a", "champion", "wrong labels", detach_aliases=True)
    assert (deleted.version, deleted.deleted_reason, deleted.aliases) == (1, "wrong labels", [])
    assert deleted.deleted_at is not None
    # b still refers to the same blobs
    registry.gc()
    assert stored_files(backend)["blobs"] == sorted(
        objects_of(registry, a.digests.archive, a.digests.graph)
    )
    assert registry.version("a", "1") == deleted
    assert registry.versions("a").versions == []
    assert [v.version for v in registry.versions("a", include_deleted=True).versions] == [1]
    assert registry.model("a").latest_version is None
    with failure("version-deleted"):
        registry.open_content("a", "1", "archive")
    with failure("version-deleted"):
        registry.set_alias("a", "champion", 1)
    with failure("version-deleted"):
        registry.delete_version("a", "1", "again")
    with failure("version-not-found"):
        registry.version("a", "latest")
    _, handle = registry.open_blob(a.digests.archive)
    handle.close()
    registry.delete_version("b", "1", "superseded")
    # kept through the deleted-version grace period, collected by gc after it
    kept = Registry(backend.settings(gc_deleted_grace_s=3600.0))
    try:
        assert kept.gc().objects == []
    finally:
        kept.close()
    assert registry.gc(dry_run=True).objects == stored_files(backend)["blobs"]
    assert registry.gc().objects != []
    assert stored_files(backend)["blobs"] == []
    with failure("blob-not-found"):
        registry.open_blob(a.digests.archive)
    # numbers are never reused; the same program may come back as a new version
    again = push(registry, "a", archives["conv"])
    assert (again.created, again.version.version) == (True, 2)
    with failure("invalid-name"):
        registry.delete_version("a", "2", " ")


def test_paging(registry: Registry, archives: dict[str, bytes]) -> None:
    for name in ("m3", "m1", "m2"):
        push(registry, name, archives["multi_out"])
    for index in range(4):
        push(registry, "m1", variant(archives["conv"], index + 1))
    first = registry.models(limit=2)
    assert ([m.name for m in first.models], first.next) == (["m1", "m2"], "m2")
    rest = registry.models(limit=2, after=first.next)
    assert ([m.name for m in rest.models], rest.next) == (["m3"], None)
    assert (first.models[0].latest_version, first.models[0].version_count) == (5, 5)
    page = registry.versions("m1", limit=3)
    assert ([v.version for v in page.versions], page.next) == ([1, 2, 3], 3)
    page = registry.versions("m1", limit=3, after=page.next)
    assert ([v.version for v in page.versions], page.next) == ([4, 5], None)


def test_invalid_program_is_refused_with_the_report(
    registry: Registry, archives: dict[str, bytes], backend: Backend
) -> None:
    from tests.registry.conftest import rewrite_member

    bad = rewrite_member(
        archives["conv"],
        "models/model.json",
        lambda b: b.replace(b"torch.ops.aten.relu.default", b"torch.ops.aten.relu_nope.default"),
    )
    with failure("invalid-program") as caught:
        push(registry, "bad", bad)
    assert [(i.code, i.path) for i in caught.value.issues] == [
        ("operator-unknown", "/graph_module/graph/nodes/1/target")
    ]
    with failure("model-not-found"):
        registry.model("bad")


def test_cleanup_removes_leftovers_and_keeps_live_staging(
    registry: Registry, archives: dict[str, bytes], backend: Backend
) -> None:
    kept = push(registry, "m", archives["conv"]).version
    orphan = "ab" * 32
    backend.put_raw(f"ab/{orphan}", b"left by a crash")
    backend.put_raw("ab/not-a-digest", b"?")
    backend.put_raw("stray.tmp", b"?")
    # a process that died: its lock file is there but nobody holds it
    dead = backend.data_dir / "tmp" / "host-1-dead"
    dead.mkdir()
    (dead / ".lock").touch()
    (dead / "blob-x").write_bytes(b"half an upload")
    claiming = backend.data_dir / "tmp" / ".claiming-host-2-dead"
    claiming.mkdir()
    old = time.time() - 3600
    os.utime(claiming, (old, old))
    # another live process: its staged file must survive
    other = BlobStore(backend.settings())
    live = other.stage()
    live.write(b"being received")
    live.finish()
    try:
        report = registry.cleanup()
        assert report.model_dump() == {
            "blobs": [orphan],
            "strays": ["ab/not-a-digest", "stray.tmp"],
            "staging": [".claiming-host-2-dead", "host-1-dead"],
        }
        assert live.path.read_bytes() == b"being received"
        assert stored_files(backend) == {
            "blobs": sorted(objects_of(registry, kept.digests.archive, kept.digests.graph)),
            "staged": [f"{other.staging.owner.name}/{live.path.name}"],
        }
    finally:
        other.close()
    assert not other.staging.owner.exists()
    assert registry.cleanup().model_dump() == {"blobs": [], "strays": [], "staging": []}


def test_concurrent_pushes_get_consecutive_numbers(
    backend: Backend, archives: dict[str, bytes]
) -> None:
    """Two registries (as two processes would) on one database, four threads each, all
    entering the storing step at once (torch checks run first: they are not thread-safe)."""
    first, second = Registry(backend.settings()), Registry(backend.settings())
    ready = []
    for index in range(8):
        registry = first if index % 2 else second
        staged = registry.blobs.stage_bytes(variant(archives["conv"], index + 1))
        ready.append((registry, prepare(registry, staged.path, INLINE, INLINE)))
        staged.discard()
    results: list[VersionInfo] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(ready))

    def pusher(registry: Registry, candidate: Candidate) -> None:
        start.wait()
        try:
            results.append(registry.push("busy", candidate).version)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pusher, args=args) for args in ready]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        first.close()
        second.close()
    assert errors == []
    assert sorted(v.version for v in results) == list(range(1, 9))
    assert len({v.digests.program for v in results}) == 8


def test_paths_of_blobs_are_content_addressed(registry: Registry, backend: Backend) -> None:
    staged = registry.blobs.stage_bytes(b"hello")
    digest = registry.blobs.place(staged)
    assert digest == sha256(b"hello")
    objects = registry.blobs.objects
    if isinstance(objects, LocalObjects):
        assert objects.path(digest) == Path(registry.settings.data_dir) / "blobs" / "2c" / digest
    else:
        assert isinstance(objects, S3Objects)
        assert objects.key(digest) == f"{backend.blob_url.split('/', 3)[3]}/2c/{digest}"
    with registry.blobs.open(digest) as handle:
        assert handle.read() == b"hello"
    assert not staged.path.exists()
    # placing the same bytes again leaves the blob and drops the staged copy
    again = registry.blobs.stage_bytes(b"hello")
    assert registry.blobs.place(again) == digest
    assert not again.path.exists()
    assert registry.cleanup().blobs == [digest]


def test_an_unusable_database_is_registry_unavailable(backend: Backend, tmp_path: Path) -> None:
    if backend.kind == "sqlite":
        # a directory where the database file should be: SQLite cannot open it
        (backend.data_dir / "registry.sqlite3").mkdir(parents=True)
        settings = backend.settings()
    else:
        settings = backend.settings(database_url="postgresql://postgres@127.0.0.1:9/nowhere")
    with failure("registry-unavailable"):
        Registry(settings)
    # nothing of the failed open stays behind: no staging directory claimed for good
    assert list((backend.data_dir / "tmp").iterdir()) == []


def test_round_tripped_program_is_the_same_version(
    registry: Registry, archives: dict[str, bytes]
) -> None:
    """torch's load + save of a program (storage offsets dropped) and what the registry serves
    of it push as the version already there: one program digest across the round trips."""
    first = push(registry, "split", archives["multi_out"])
    resaved = archive_bytes(torch.export.load(io.BytesIO(archives["multi_out"])))
    assert resaved != archives["multi_out"]
    again = push(registry, "split", resaved)
    assert (again.created, again.version) == (False, first.version)
    pulled = push(registry, "split", read_archive(registry, "split", "1"))
    assert (pulled.created, pulled.version) == (False, first.version)


def test_tied_parameters_are_counted_once(registry: Registry) -> None:
    torch.manual_seed(0)
    module = TiedLM()
    ids = torch.randint(0, 16, (2, 5))
    archive = archive_bytes(torch.export.export(module, (ids,), strict=False))
    summary = push(registry, "tied", archive).version.summary
    assert summary.parameter_count == sum(p.numel() for p in module.parameters())
    assert (summary.parameters, summary.tied_parameters) == (4, 1)
