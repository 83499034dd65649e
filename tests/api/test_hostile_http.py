"""The hostile corpus (tests/hostile.py) through HTTP, against a server whose processes, the API
process and every torch worker, record their audit events: each payload is refused with its code,
no marker file appears, and no submission causes an event the clean warm-up did not. Pushed to
the registry, a payload also leaves nothing stored: no version, no blob, nothing staged.
Hostile sample inputs are left out of everything served instead, with a warning.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.http.problems import CATALOGUE
from tests.api.conftest import SERVER_ENV, Server, stop_server, upload_leftovers
from tests.archive.zipcraft import rezip
from tests.fuzz.audit_hook import read_events
from tests.fuzz.launch import start_audited_server
from tests.hostile import HOSTILE, SAMPLE_INPUT_PAYLOADS, Hostile, with_sample_inputs
from tests.registry.conftest import sample_inputs_of, stored_files
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes

#: The four operations, and a push to the registry (which validates at level torch first).
ENDPOINTS = ("serialize", "validate", "canonicalize", "deserialize", "registry")
#: Events no refusal can explain, whatever the warm-up recorded: unpickling, spawning, dlopen.
NEVER = (
    "pickle.find_class",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "ctypes.dlopen",
)
#: Clean programs of the bases the hostile builders start from.
WARM_UP = ("conv", "dynamic", "constants")

Event = tuple[str, str]


@dataclass
class Audited:
    """The audited server, its events folder and the events of its clean warm-up."""

    server: Server
    client: httpx.Client
    events: Path
    baseline: set[Event]

    def marks(self) -> dict[str, int]:
        """How many events each process has recorded so far."""
        return {name: len(events) for name, events in read_events(self.events).items()}

    def stored(self) -> dict[str, list[str]]:
        """The registry's blobs and staged files."""
        return stored_files(self.server.tmp / "data")

    def since(self, marks: dict[str, int]) -> list[Event]:
        """Every event recorded after `marks`, in every process."""
        return [
            event
            for name, events in read_events(self.events).items()
            for event in events[marks.get(name, 0) :]
        ]


def _submit(client: httpx.Client, endpoint: str, data: bytes, model: str) -> httpx.Response:
    if endpoint == "registry":
        # as a form (the CLI sends a raw body): the payload passes through the form splitter
        form = {"file": ("model.pt2", data, "application/zip")}
        return client.post(f"/v1/models/{model}/versions", files=form)
    if endpoint == "deserialize":
        files = {"document": ("model.pt2", data, "application/zip")}
        return client.post("/v1/deserialize", files=files)
    params = {"level": "torch"} if endpoint == "validate" else {}
    headers = {"Content-Type": "application/zip"}
    return client.post(f"/v1/{endpoint}", params=params, content=data, headers=headers)


@pytest.fixture(scope="module")
def archives(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    """torch.export.save archives of every zoo program, the builders' bases."""
    return {name: archive_bytes(zoo[name].ep) for name in PROGRAM_NAMES}


@pytest.fixture(scope="module")
def audited(
    archives: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Audited]:
    """The audited server after a clean warm-up through every endpoint, torch included."""
    events = tmp_path_factory.mktemp("audit")
    server = start_audited_server(SERVER_ENV, events)
    try:
        with server.client() as client:
            assert client.get("/readyz").status_code == 200
            for name in WARM_UP:
                # torch's own archive and the same members as python's zipfile writes them
                # (the builders' form: cp437 names are decoded by a lazily imported codec)
                for data in (archives[name], rezip(archives[name])):
                    for endpoint in ENDPOINTS:
                        answer = _submit(client, endpoint, data, f"warm-{name}")
                        assert answer.status_code in (200, 201), (name, endpoint, answer.text)
            baseline = {e for found in read_events(events).values() for e in found}
            running = Audited(server, client, events, baseline)
            # the clean pushes are stored where the tests look for what a payload left, and
            # each pulls back as the archive its version records
            assert running.stored()["blobs"]
            for name in WARM_UP:
                version = client.get(f"/v1/models/warm-{name}/versions/latest").json()
                pulled = client.get(f"/v1/models/warm-{name}/versions/latest/archive").content
                assert hashlib.sha256(pulled).hexdigest() == version["digests"]["archive"]
            yield running
    finally:
        stop_server(server)


def test_the_hooks_see_the_api_process_and_the_workers(audited: Audited) -> None:
    """The API process recorded its events without ever importing torch; a torch worker
    recorded sympy compiling the dynamic program's expressions (the sink the screen guards)."""
    by_process = read_events(audited.events)
    api = by_process.pop(f"events-{audited.server.process.pid}.jsonl")
    assert api
    assert ("import", "torch") not in api
    assert by_process, "no torch worker recorded anything"
    assert any(
        event == "compile" and "Symbol" in arg
        for events in by_process.values()
        for event, arg in events
    )


def _refusal_codes(endpoint: str, answer: httpx.Response) -> list[str]:
    """The codes a refusal names. A report (validate's 200) or a program the registry refuses
    as invalid (422 invalid-program) lists the screen's findings; any other refusal is the
    problem itself, with its catalogue status."""
    body = answer.json()
    if endpoint == "validate" and answer.status_code == 200:
        assert body["valid"] is False
        return [f["code"] for f in body["findings"] if f["severity"] == "error"]
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.status_code == CATALOGUE[body["code"]].status, answer.text
    if endpoint == "registry" and body["code"] == "invalid-program":
        return [e["code"] for e in body["errors"]]
    return [body["code"]]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_refused_over_http_and_nothing_runs(
    hostile: Hostile,
    endpoint: str,
    audited: Audited,
    archives: dict[str, bytes],
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    data = hostile.build(archives, marker)
    model = f"hostile-{hostile.name}"
    stored = audited.stored()
    marks = audited.marks()
    answer = _submit(audited.client, endpoint, data, model)
    assert 400 <= answer.status_code < 500 or endpoint == "validate", answer.text
    assert hostile.code in _refusal_codes(endpoint, answer), answer.text
    new = audited.since(marks)
    assert [e for e in new if e not in audited.baseline] == []
    assert [e for e in new if e[0].startswith(NEVER)] == []
    assert not marker.exists()
    assert upload_leftovers(audited.server) == []
    assert audited.stored() == stored
    if endpoint == "registry":
        missing = audited.client.get(f"/v1/models/{model}")
        assert (missing.status_code, missing.json()["code"]) == (404, "model-not-found")


@pytest.mark.parametrize("payload", sorted(SAMPLE_INPUT_PAYLOADS))
def test_unproven_sample_inputs_are_left_out_of_everything_served(
    payload: str, audited: Audited, archives: dict[str, bytes], tmp_path: Path
) -> None:
    """Hostile sample inputs refuse nothing: every endpoint answers, the report and the push
    warn that they were dropped, and neither the pulled archive nor deserialize's holds them."""
    marker = tmp_path / "marker"
    data = with_sample_inputs(archives["conv"], SAMPLE_INPUT_PAYLOADS[payload](marker))
    model = f"dropped-{payload}"
    marks = audited.marks()
    answers = {endpoint: _submit(audited.client, endpoint, data, model) for endpoint in ENDPOINTS}
    for endpoint, answer in answers.items():
        assert answer.status_code in (200, 201), (endpoint, answer.text)
    report = answers["validate"].json()
    assert report["valid"] is True
    pushed = answers["registry"].json()
    for warnings in (report["findings"], pushed["warnings"]):
        assert [w["severity"] for w in warnings if w["code"] == "sample-inputs-dropped"] == [
            "warning"
        ]
    assert sample_inputs_of(answers["deserialize"].content) == b""
    pulled = audited.client.get(f"/v1/models/{model}/versions/1/archive")
    assert pulled.headers["etag"] == f'"{hashlib.sha256(pulled.content).hexdigest()}"'
    assert pulled.headers["etag"] == f'"{pushed["digests"]["archive"]}"'
    assert sample_inputs_of(pulled.content) == b""
    # the workers unpickle our own job arguments, as in the clean warm-up; nothing else
    new = audited.since(marks)
    assert [e for e in new if e[0].startswith(NEVER) and e not in audited.baseline] == []
    assert not marker.exists()
    assert upload_leftovers(audited.server) == []
