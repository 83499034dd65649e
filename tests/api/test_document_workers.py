"""Document work through the HTTP layer: uploads over document_inline_bytes are worked on in the
document pool with the library's answers, and admission control answers 503 service-busy with
Retry-After when the budget and its queue are full."""

from __future__ import annotations

import io
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app import operations as ops
from app.main import create_app
from app.settings import Settings
from app.workers.admission import Admission
from app.workers.runner import DocumentRunner
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes, outputs_close, torch_json

ZIP = {"Content-Type": "application/zip"}
JSON = {"Content-Type": "application/json"}
#: every upload goes to a document worker
IN_WORKERS = Settings(document_inline_bytes=0, document_workers=1, workers=1)


@pytest.fixture(scope="module")
def archive(zoo: dict[str, ZooProgram]) -> bytes:
    return archive_bytes(zoo[PROGRAM_NAMES[0]].ep)


@pytest.fixture(scope="module")
def in_workers() -> Iterator[TestClient]:
    with TestClient(create_app(IN_WORKERS)) as client:
        yield client


def _runner(client: TestClient) -> DocumentRunner:
    app = client.app
    assert isinstance(app, FastAPI)
    runner: DocumentRunner = app.state.documents
    return runner


def _admission(client: TestClient) -> Admission:
    app = client.app
    assert isinstance(app, FastAPI)
    admission: Admission = app.state.admission
    return admission


def test_uploads_over_the_threshold_are_read_in_a_document_worker(
    in_workers: TestClient, archive: bytes
) -> None:
    answer = in_workers.post("/v1/canonicalize", content=archive, headers=ZIP)
    assert answer.status_code == 200, answer.text
    with ops.open_source(archive, "zip", IN_WORKERS) as source:
        expected = ops.canonical(source, IN_WORKERS)
    assert answer.content == expected.data
    assert answer.headers["X-Program-Digest"] == expected.digests.program
    assert answer.headers["ETag"] == f'"{expected.digests.program}"'
    assert _runner(in_workers).get().worker_pids()  # the pool was started for it
    _validates_as_the_library(in_workers, IN_WORKERS, archive, "zip")


def _validates_as_the_library(
    client: TestClient, settings: Settings, data: bytes, media: ops.Media
) -> None:
    """/v1/validate answers the library's report at levels schema and semantic."""
    headers = JSON if media == "json" else ZIP
    for level in ("schema", "semantic"):
        report = client.post("/v1/validate", params={"level": level}, content=data, headers=headers)
        assert report.status_code == 200, report.text
        with ops.open_source(data, media, settings) as source:
            library = ops.check(source, level, settings)
        assert report.json() == orjson.loads(library.model_dump_json())


def test_inspect_diff_and_compat_in_a_document_worker(
    in_workers: TestClient, archive: bytes
) -> None:
    inspected = in_workers.post(
        "/v1/inspect", params={"view": "operators"}, content=archive, headers=ZIP
    )
    assert inspected.status_code == 200, inspected.text
    assert inspected.json()["view"] == "operators"
    files = {
        "old": ("a.pt2", archive, "application/zip"),
        "new": ("b.pt2", archive, "application/zip"),
    }
    diffed = in_workers.post("/v1/diff", files=files)
    assert diffed.status_code == 200, diffed.text
    with (
        ops.open_source(archive, "zip", IN_WORKERS) as was,
        ops.open_source(archive, "zip", IN_WORKERS) as now,
    ):
        assert diffed.json() == orjson.loads(
            ops.program_diff(was, now, IN_WORKERS).model_dump_json()
        )
    compat = in_workers.post("/v1/compat", content=archive, headers=ZIP)
    assert compat.status_code == 200, compat.text
    assert compat.json()["min_version"]


def test_torch_level_reads_the_document_the_document_worker_checked(
    in_workers: TestClient, archive: bytes
) -> None:
    report = in_workers.post(
        "/v1/validate", params={"level": "torch"}, content=archive, headers=ZIP
    )
    assert report.status_code == 200, report.text
    body = report.json()
    assert body["valid"], body
    assert "torch" not in body["unchecked"]


def test_past_the_budget_and_its_queue_the_answer_is_503_with_retry_after(
    archive: bytes,
) -> None:
    settings = Settings(admission_budget_mb=64, admission_queue=0, admission_retry_after_s=3)
    with TestClient(create_app(settings)) as client:
        admission = _admission(client)
        admission.in_flight = admission.budget  # as if large work were in flight
        answer = client.post(
            "/v1/validate", params={"level": "schema"}, content=archive, headers=ZIP
        )
        assert answer.status_code == 503
        assert answer.headers["Retry-After"] == "3"
        assert answer.headers["Content-Type"] == "application/problem+json"
        assert answer.json()["code"] == "service-busy"
        admission.in_flight = 0
        again = client.post(
            "/v1/validate", params={"level": "schema"}, content=archive, headers=ZIP
        )
        assert again.status_code == 200, again.text
        assert admission.in_flight == 0  # given back once the route returned


def test_a_request_waits_in_the_queue_until_the_budget_frees(archive: bytes) -> None:
    settings = Settings(admission_budget_mb=64, admission_queue=1, admission_wait_s=30)
    with TestClient(create_app(settings)) as client:
        admission = _admission(client)
        held = admission.budget
        admission.in_flight = held
        answers: list[int] = []

        def send() -> None:
            answer = client.post("/v1/compat", content=archive, headers=ZIP)
            answers.append(answer.status_code)

        waiting = threading.Thread(target=send)
        waiting.start()
        deadline = time.monotonic() + 30
        while admission.waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert admission.waiting == 1
        assert answers == []
        # the queue (of one) is full: the next request is refused at once
        busy = client.post("/v1/compat", content=archive, headers=ZIP)
        assert busy.status_code == 503
        admission._release(held)  # the work in flight ends
        waiting.join(30)
        assert answers == [200]


def test_serialize_and_deserialize_read_their_documents_in_workers(
    in_workers: TestClient, archive: bytes, zoo: dict[str, ZooProgram]
) -> None:
    program = zoo[PROGRAM_NAMES[0]]
    plain = in_workers.post("/v1/serialize", content=archive, headers=ZIP)
    assert plain.status_code == 200, plain.text
    assert plain.json()["documents"]["model"] == orjson.loads(torch_json(program.ep))
    bundle = in_workers.post(
        "/v1/serialize", params={"weights": "safetensors"}, files={"file": archive}
    )
    assert bundle.status_code == 200, bundle.text
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as zf:
        document = zf.read("documents/model.json")
        weights = zf.read("weights.safetensors")
    rebuilt = in_workers.post("/v1/deserialize", files={"document": document, "weights": weights})
    assert rebuilt.status_code == 200, rebuilt.text
    # the archive was written by the app from a program this test exported
    loaded = torch.export.load(io.BytesIO(rebuilt.content))
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())
    missing = in_workers.post("/v1/deserialize", files={"document": document})
    assert missing.status_code == 422
    assert missing.json()["code"] == "weights-missing"


def test_a_push_is_admitted_as_the_program_routes_are(archive: bytes, tmp_path: Path) -> None:
    """A push reads the archive's documents to vet it: past the budget and its queue it is
    refused with 503 service-busy, and once admitted its share is given back."""
    settings = Settings(
        data_dir=tmp_path / "data", admission_budget_mb=64, admission_queue=0, workers=1
    )
    with TestClient(create_app(settings)) as client:
        admission = _admission(client)
        admission.in_flight = admission.budget
        busy = client.post("/v1/models/busy/versions", content=archive, headers=ZIP)
        assert busy.status_code == 503, busy.text
        assert busy.json()["code"] == "service-busy"
        assert busy.headers["Retry-After"] == str(settings.admission_retry_after_s)
        admission.in_flight = 0
        pushed = client.post("/v1/models/busy/versions", content=archive, headers=ZIP)
        assert pushed.status_code == 201, pushed.text
        assert admission.in_flight == 0


def test_a_small_json_body_is_checked_from_memory_a_large_one_from_its_file(
    zoo: dict[str, ZooProgram], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSON body of at most document_inline_bytes never touches the disk (no upload folder,
    no folder for a response) and gets the library's answer; a larger one is streamed to a
    file, as are archives and forms."""
    document = torch_json(zoo[PROGRAM_NAMES[0]].ep)
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args: Any, **kwargs: Any) -> str:
        folder: str = real_mkdtemp(*args, **kwargs)
        made.append(Path(folder).name)
        return folder

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    for inline, on_disk in ((len(document), False), (len(document) - 1, True)):
        settings = Settings(document_inline_bytes=inline, document_workers=1, workers=1)
        with TestClient(create_app(settings)) as client:
            made.clear()
            _validates_as_the_library(client, settings, document, "json")
            compat = client.post("/v1/compat", content=document, headers=JSON)
            assert compat.status_code == 200, compat.text
            uploads = [name for name in made if name.startswith("pt2serde-upload-")]
            assert len(uploads) == (3 if on_disk else 0), made
            assert not [name for name in made if not name.startswith("pt2serde-upload-")]


def test_a_small_empty_or_oversized_json_body_is_refused_as_before() -> None:
    settings = Settings(max_upload_bytes=100, document_workers=1, workers=1)
    with TestClient(create_app(settings)) as client:
        empty = client.post("/v1/validate", content=b"", headers=JSON)
        assert empty.status_code == 400, empty.text
        assert empty.json()["code"] == "bad-request"
        large = client.post("/v1/validate", content=b"{" + b" " * 200 + b"}", headers=JSON)
        assert large.status_code == 413, large.text
        assert large.json()["code"] == "payload-too-large"
        assert large.headers["Content-Type"] == "application/problem+json"


def test_level_torch_hands_the_checked_document_on_in_a_scratch_file_it_removes(
    archive: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with TestClient(create_app(Settings(workers=1, document_workers=1))) as client:
        report = client.post(
            "/v1/validate", params={"level": "torch"}, content=archive, headers=ZIP
        )
        assert report.status_code == 200, report.text
        assert report.json()["valid"], report.text
        assert "torch" not in report.json()["unchecked"]
        semantic = client.post(
            "/v1/validate", params={"level": "semantic"}, content=archive, headers=ZIP
        )
        assert semantic.status_code == 200, semantic.text
    assert not list(tmp_path.glob("pt2serde-*"))
