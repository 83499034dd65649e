"""gc beyond blob objects: an object store's unfinished multipart uploads (left by a replica
killed mid-upload) and the answers kept for archives no kept version has."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.api.graphs import graph_answer, version_graph_file
from app.registry.answers import answers_folder
from app.registry.blobs.s3 import S3Objects
from app.registry.gc import collect
from app.registry.store import Registry
from app.workers.runner import DocumentRunner
from tests.registry.conftest import Backend, make_backend
from tests.registry.test_store import push


@pytest.fixture(params=["sqlite-s3", "postgresql-s3"])
def s3_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """SeaweedFS S3 blobs, on SQLite or PostgreSQL."""
    return make_backend(request, tmp_path)


def _begin(objects: S3Objects, key: str) -> str:
    """A multipart upload of `key` with one part sent and never completed; its id."""
    upload = objects.client.create_multipart_upload(Bucket=objects.bucket, Key=key)
    objects.client.upload_part(
        Bucket=objects.bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 99
    )
    return upload["UploadId"]


def _in_progress(objects: S3Objects, prefix: str) -> set[str]:
    answer = objects.client.list_multipart_uploads(Bucket=objects.bucket, Prefix=prefix)
    return {item["UploadId"] for item in answer.get("Uploads", [])}


def test_gc_aborts_unfinished_uploads_past_the_grace(s3_backend: Backend) -> None:
    registry = Registry(s3_backend.settings(gc_claim_grace_s=3600.0))
    objects = registry.blobs.objects
    assert isinstance(objects, S3Objects)
    outside = f"elsewhere-{objects.prefix}ab/{'ab' * 32}"
    others = _begin(objects, outside)
    try:
        old = _begin(objects, objects.key("ab" * 32))
        # within the grace: kept
        assert registry.gc().uploads == []
        assert _in_progress(objects, objects.prefix) == {old}
        time.sleep(3.0)
        fresh = _begin(objects, objects.key("cd" * 32))
        graced = s3_backend.settings(gc_claim_grace_s=2.0)
        dry = collect(registry.db, registry.blobs, graced, dry_run=True)
        assert dry.uploads == [f"{objects.key('ab' * 32)} {old}"]
        assert _in_progress(objects, objects.prefix) == {old, fresh}
        # past the grace: aborted, its parts freed; the fresh one and others' uploads stay
        assert collect(registry.db, registry.blobs, graced).uploads == dry.uploads
        assert _in_progress(objects, objects.prefix) == {fresh}
        assert others in _in_progress(objects, outside)
        assert [u.upload_id for u in objects.unfinished()] == [fresh]
        # no grace: a killed replica's upload is aborted at once
        assert collect(registry.db, registry.blobs, s3_backend.settings()).uploads != []
        assert objects.unfinished() == []
        assert not list(objects.listing())
    finally:
        objects.client.abort_multipart_upload(Bucket=objects.bucket, Key=outside, UploadId=others)
        registry.close()


def test_gc_removes_graph_answers_of_collected_versions(
    registry: Registry, backend: Backend, archives: dict[str, bytes]
) -> None:
    first = push(registry, "m", archives["linear_bn_train"]).version
    second = push(registry, "m", archives["conv"]).version
    # the answers are built in a document worker, as a view builds them
    runner = DocumentRunner(registry.settings.model_copy(update={"document_workers": 1}))
    try:
        built = [version_graph_file(registry, runner, "m", str(v.version)) for v in (first, second)]
    finally:
        runner.close()
    folder = answers_folder(registry.settings)
    assert sorted(built) == sorted(folder.glob("*.json"))
    # a half-written answer's temporary file is not an answer
    partial = folder / f".{first.digests.archive}.graph.json.x.part"
    partial.write_bytes(b"{")
    registry.delete_version("m", "1", "superseded")
    graced = backend.settings(gc_deleted_grace_s=3600.0)
    assert collect(registry.db, registry.blobs, graced).answers == []
    assert all(path.is_file() for path in built)
    dry = registry.gc(dry_run=True)
    assert dry.answers == [graph_answer(first.digests.archive)]
    assert built[0].is_file()
    assert registry.gc().answers == [graph_answer(first.digests.archive)]
    assert sorted(folder.iterdir()) == sorted([built[1], partial])
    assert registry.gc().answers == []
