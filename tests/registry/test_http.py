"""The registry through a real HTTP server, on SQLite and on PostgreSQL."""

from __future__ import annotations

import hashlib
import io
import socket
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import torch

from app import operations as ops
from app.client import Client, ClientFailure
from app.settings import Settings
from tests.cli.test_cli import run as run_cli
from tests.registry.conftest import (
    BACKENDS,
    RegistryServer,
    assert_served,
    make_backend,
    rewrite_member,
    start_registry_server,
    stop_registry_server,
    stored_files,
    variant,
    warm,
)
from tests.test_client import version_answer
from tests.zoo import ZooProgram, outputs_close, torch_json

ZIP = {"Content-Type": "application/zip"}
LIMIT = 256 * 1024


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RegistryServer]:
    """One server per backend for this module, with a small upload limit."""
    backend = make_backend(request, tmp_path_factory.mktemp("http"))
    server = start_registry_server(backend, {"PT2SERDE_MAX_UPLOAD_BYTES": str(LIMIT)})
    try:
        warm(server)
        yield server
    finally:
        stop_registry_server(server)


@pytest.fixture
def client(served: RegistryServer) -> Iterator[httpx.Client]:
    with served.client() as c:
        yield c


def data_dir(server: RegistryServer) -> Path:
    assert server.backend is not None
    return server.backend.data_dir


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


def program_digest(archive: bytes) -> str:
    settings = Settings()
    with ops.open_source(archive, "zip", settings) as source:
        return ops.canonical(source, settings).digests.program


@pytest.mark.parametrize("name", ["conv", "linear_bn_train", "dynamic", "custom_op"])
def test_push_then_fetch_everything(
    name: str, client: httpx.Client, archives: dict[str, bytes], zoo: dict[str, ZooProgram]
) -> None:
    model = f"rt-{name.replace('_', '-')}"
    pushed = client.post(f"/v1/models/{model}/versions", content=archives[name], headers=ZIP)
    assert pushed.status_code == 201, pushed.text
    assert pushed.headers["location"] == f"/v1/models/{model}/versions/1"
    info = pushed.json()
    assert info.pop("warnings") == []
    digests = info["digests"]
    assert (info["model"], info["version"]) == (model, 1)
    assert client.get(f"/v1/models/{model}/versions/1").json() == info

    fetched = client.get(f"/v1/models/{model}/versions/1/archive")
    assert fetched.status_code == 200
    assert fetched.headers["content-type"] == "application/zip"
    assert fetched.headers["etag"] == f'"{digests["archive"]}"'
    assert sha256(fetched.content) == digests["archive"]
    assert len(fetched.content) == info["archive_size"]
    assert_served(fetched.content, archives[name])
    assert program_digest(fetched.content) == digests["program"] == program_digest(archives[name])
    program = zoo[name]
    # the archive was made by this test session from its own program
    loaded = torch.export.load(io.BytesIO(fetched.content))
    assert outputs_close(loaded.module()(*program.args, **program.kwargs), program.run())

    document = client.get(f"/v1/models/{model}/versions/1/document")
    assert document.status_code == 200
    assert document.content == torch_json(program.ep)
    canonical = client.get(f"/v1/models/{model}/versions/latest/canonical")
    assert canonical.headers["etag"] == f'"{digests["graph"]}"'
    assert sha256(canonical.content) == digests["graph"]
    blob = client.get(f"/v1/blobs/{digests['archive']}")
    assert (blob.status_code, blob.content) == (200, fetched.content)
    assert client.get(f"/v1/blobs/{digests['graph']}").content == canonical.content


def test_same_program_again_is_the_same_version(
    client: httpx.Client, archives: dict[str, bytes]
) -> None:
    first = client.post("/v1/models/again/versions", content=archives["multi_out"], headers=ZIP)
    assert first.status_code == 201
    form = {"file": ("m.pt2", archives["multi_out"], "application/zip")}
    second = client.post("/v1/models/again/versions", files=form)
    assert second.status_code == 200, second.text
    assert second.json() == first.json()
    assert second.headers["location"] == "/v1/models/again/versions/1"
    other = client.post("/v1/models/again/versions", files={"file": archives["conv"]})
    assert (other.status_code, other.json()["version"]) == (201, 2)


def test_a_push_names_its_parent(client: httpx.Client, archives: dict[str, bytes]) -> None:
    """`parent` must name a live version of the model (its tensors are the deltas' bases)."""
    base = "/v1/models/parented/versions"
    assert client.post(base, content=archives["conv"], headers=ZIP).status_code == 201
    missing = client.post(f"{base}?parent=9", content=variant(archives["conv"], 3), headers=ZIP)
    problem(missing, 404, "version-not-found")
    onto = client.post(f"{base}?parent=1", content=variant(archives["conv"], 3), headers=ZIP)
    assert (onto.status_code, onto.json()["version"]) == (201, 2)


def test_conditional_and_range_requests(client: httpx.Client, archives: dict[str, bytes]) -> None:
    info = client.post("/v1/models/ranges/versions", content=archives["conv"], headers=ZIP).json()
    url = "/v1/models/ranges/versions/1/archive"
    data = client.get(url).content
    etag = f'"{info["digests"]["archive"]}"'
    size = len(data)
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        cached = client.get(url, headers={"If-None-Match": header})
        assert (cached.status_code, cached.content, cached.headers["etag"]) == (304, b"", etag)
    assert client.get(url, headers={"If-None-Match": '"other"'}).content == data
    cases = {
        "bytes=0-99": (206, 0, 100),
        "bytes=100-": (206, 100, size),
        "bytes=-10": (206, size - 10, size),
        f"bytes=10-{size + 50}": (206, 10, size),
        f"bytes=5-{size + 50},0-9": (206, 0, size),
        "items=0-5": (200, 0, size),
        "bytes=x-y": (200, 0, size),
    }
    for header, (status, start, end) in cases.items():
        part = client.get(url, headers={"Range": header})
        assert (part.status_code, part.content) == (status, data[start:end]), header
        assert part.headers["content-length"] == str(end - start)
        if status == 206:
            assert part.headers["content-range"] == f"bytes {start}-{end - 1}/{size}"
    fresh = client.get(url, headers={"Range": "bytes=0-9", "If-Range": etag})
    assert (fresh.status_code, fresh.content) == (206, data[:10])
    stale = client.get(url, headers={"Range": "bytes=0-9", "If-Range": '"old"'})
    assert (stale.status_code, stale.content) == (200, data)
    graph = info["digests"]["graph"]
    canonical = client.get(
        "/v1/models/ranges/versions/1/canonical", headers={"If-None-Match": f'"{graph}"'}
    )
    assert canonical.status_code == 304
    blob = client.get(f"/v1/blobs/{info['digests']['archive']}", headers={"Range": "bytes=0-1"})
    assert (blob.status_code, blob.content) == (206, b"PK")


def test_lists_page_through_models_and_versions(
    client: httpx.Client, archives: dict[str, bytes]
) -> None:
    for name in ("list-c", "list-a", "list-b"):
        assert client.post(f"/v1/models/{name}/versions", content=archives["conv"], headers=ZIP)
    for index in (1, 2):
        client.post(
            "/v1/models/list-b/versions", content=variant(archives["conv"], index), headers=ZIP
        )
    seen: list[str] = []
    after = "list-"
    while after is not None and after.startswith("list-"):
        page = client.get("/v1/models", params={"limit": 1, "after": after}).json()
        seen += [m["name"] for m in page["models"] if m["name"].startswith("list-")]
        after = page["next"]
    assert seen == ["list-a", "list-b", "list-c"]
    model = client.get("/v1/models/list-b").json()
    assert (model["latest_version"], model["version_count"], model["aliases"]) == (3, 3, {})
    page = client.get("/v1/models/list-b/versions", params={"limit": 2}).json()
    assert ([v["version"] for v in page["versions"]], page["next"]) == ([1, 2], 2)
    page = client.get("/v1/models/list-b/versions", params={"after": 2}).json()
    assert ([v["version"] for v in page["versions"]], page["next"]) == ([3], None)
    problem(client.get("/v1/models", params={"limit": 0}), 422, "request-invalid")


def test_aliases_tags_diff_and_delete(client: httpx.Client, archives: dict[str, bytes]) -> None:
    base = "/v1/models/life"
    client.post(f"{base}/versions", content=archives["conv"], headers=ZIP)
    client.post(f"{base}/versions", content=variant(archives["conv"], 7), headers=ZIP)
    client.post(f"{base}/versions", content=archives["linear_bn_train"], headers=ZIP)

    alias = client.put(f"{base}/aliases/champion", json={"version": 1})
    assert (alias.status_code, alias.json()["version"]) == (200, 1)
    assert client.get(f"{base}/versions/champion").json()["version"] == 1
    assert client.put(f"{base}/aliases/champion", json={"version": 2}).json()["version"] == 2
    client.put(f"{base}/aliases/staging", json={"version": 3})
    assert client.get(base).json()["aliases"] == {"champion": 2, "staging": 3}
    problem(client.put(f"{base}/aliases/latest", json={"version": 1}), 422, "invalid-name")
    problem(client.put(f"{base}/aliases/x", json={"version": 9}), 404, "version-not-found")
    problem(client.put(f"{base}/aliases/x", json={"version": "two"}), 422, "request-invalid")

    tagged = client.put(f"{base}/versions/champion/tags/owner", json={"value": "vision team"})
    assert tagged.json()["tags"] == {"owner": "vision team"}
    assert client.delete(f"{base}/versions/2/tags/owner").json()["tags"] == {}
    problem(client.delete(f"{base}/versions/2/tags/owner"), 404, "tag-not-found")

    weights_only = client.get(f"{base}/versions/champion/diff", params={"against": "1"})
    assert weights_only.status_code == 200, weights_only.text
    assert weights_only.json()["summary"]["verdict"] == "same-graph-new-weights"
    assert [p["name"] for p in weights_only.json()["parameters"]] == ["conv.weight"]
    as_text = client.get(
        f"{base}/versions/champion/diff", params={"against": "1", "format": "text"}
    )
    assert as_text.headers["content-type"].startswith("text/plain")
    uploaded = client.post(
        "/v1/diff",
        params={"format": "text"},
        files={"old": archives["conv"], "new": variant(archives["conv"], 7)},
    )
    assert as_text.text == uploaded.text
    assert "same-graph-new-weights" in as_text.text
    same = client.get(f"{base}/versions/1/diff", params={"against": "1"}).json()
    assert same["summary"]["verdict"] == "identical"
    other = client.get(f"{base}/versions/3/diff", params={"against": "champion"}).json()
    assert other["summary"]["verdict"] in ("compatible", "breaking")
    problem(client.get(f"{base}/versions/3/diff"), 422, "request-invalid")

    problem(client.delete(f"{base}/versions/2"), 422, "request-invalid")
    reason = {"reason": "leaked test data"}
    problem(client.delete(f"{base}/versions/champion", params=reason), 409, "version-has-aliases")
    assert client.get(f"{base}/versions/champion").json()["version"] == 2
    deleted = client.delete(f"{base}/versions/champion", params={**reason, "detach_aliases": True})
    assert deleted.status_code == 200
    assert (deleted.json()["deleted_reason"], deleted.json()["aliases"]) == ("leaked test data", [])
    assert client.get(f"{base}/versions/2").json()["deleted_at"] is not None
    problem(client.get(f"{base}/versions/2/archive"), 404, "version-deleted")
    problem(client.get(f"{base}/versions/champion"), 404, "alias-not-found")
    listed = client.get(f"{base}/versions").json()["versions"]
    assert [v["version"] for v in listed] == [1, 3]
    listed = client.get(f"{base}/versions", params={"include_deleted": True}).json()["versions"]
    assert [v["version"] for v in listed] == [1, 2, 3]

    assert client.delete(f"{base}/aliases/staging").status_code == 204
    problem(client.delete(f"{base}/aliases/staging"), 404, "alias-not-found")
    problem(client.get("/v1/models/nobody"), 404, "model-not-found")
    problem(client.get("/v1/models/bad name/versions"), 422, "invalid-name")
    problem(client.get(f"{base}/versions/9"), 404, "version-not-found")
    problem(client.get(f"/v1/blobs/{'0' * 64}"), 404, "blob-not-found")


def test_refused_uploads_leave_nothing_stored(
    client: httpx.Client, served: RegistryServer, archives: dict[str, bytes]
) -> None:
    before = stored_files(data_dir(served))
    url = "/v1/models/refused/versions"
    invalid = rewrite_member(
        archives["conv"],
        "models/model.json",
        lambda b: b.replace(b"torch.ops.aten.relu.default", b"torch.ops.aten.relu_nope.default"),
    )
    body = problem(client.post(url, content=invalid, headers=ZIP), 422, "invalid-program")
    assert [(e["code"], e["path"]) for e in body["errors"]] == [
        ("operator-unknown", "/graph_module/graph/nodes/1/target")
    ]
    big = archives["conv"] + bytes(LIMIT)
    problem(client.post(url, content=big, headers=ZIP), 413, "payload-too-large")
    chunks = (big[i : i + 8192] for i in range(0, len(big), 8192))
    problem(client.post(url, content=chunks, headers=ZIP), 413, "payload-too-large")
    document = torch_json_bytes(archives["conv"])
    json_type = {"Content-Type": "application/json"}
    problem(client.post(url, content=document, headers=json_type), 415, "unsupported-media-type")
    text_type = {"Content-Type": "text/plain"}
    problem(
        client.post(url, content=archives["conv"], headers=text_type), 415, "unsupported-media-type"
    )
    octets = {"Content-Type": "application/octet-stream"}
    problem(client.post(url, content=document, headers=octets), 415, "unsupported-media-type")
    problem(client.post(url, files={"file": document}), 415, "unsupported-media-type")
    problem(client.post(url, files={"weights": archives["conv"]}), 400, "bad-multipart")
    problem(client.post(url, content=b"", headers=ZIP), 400, "bad-request")
    not_pt2 = io.BytesIO()
    with zipfile.ZipFile(not_pt2, "w") as zf:
        zf.writestr("hello.txt", "hi")
    refused = client.post(url, content=not_pt2.getvalue(), headers=ZIP)
    assert refused.status_code == 422, refused.text
    assert str(refused.json()["code"]).startswith("archive-")
    problem(client.get("/v1/models/refused"), 404, "model-not-found")
    assert stored_files(data_dir(served)) == before


def torch_json_bytes(archive: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith("models/model.json")]
        return zf.read(name)


def test_client_gone_mid_upload_leaves_nothing(
    served: RegistryServer, client: httpx.Client, archives: dict[str, bytes]
) -> None:
    before = stored_files(data_dir(served))
    host, port = served.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/models/gone/versions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/zip\r\nContent-Length: 200000\r\n\r\n" + archives["conv"]
        )
        deadline = time.monotonic() + 10
        while stored_files(data_dir(served))["staged"] == before["staged"]:
            assert time.monotonic() < deadline, "the upload never reached the staging area"
            time.sleep(0.02)
    deadline = time.monotonic() + 10
    while stored_files(data_dir(served)) != before:
        assert time.monotonic() < deadline, stored_files(data_dir(served))
        time.sleep(0.02)
    problem(client.get("/v1/models/gone"), 404, "model-not-found")


def test_client_methods(served: RegistryServer, archives: dict[str, bytes], tmp_path: Path) -> None:
    first, second = tmp_path / "first.pt2", tmp_path / "second.pt2"
    first.write_bytes(archives["conv"])
    second.write_bytes(variant(archives["conv"], 3))
    with Client(served.url) as registry:
        pushed = registry.push("cli", first)
        assert (pushed.created, pushed.version.version) == (True, 1)
        assert registry.push("cli", first).created is False
        assert registry.push("cli", second).version.version == 2
        assert [v.version for v in registry.versions("cli")] == [1, 2]
        moved = registry.set_alias("cli", "champion", 1)
        assert (moved.alias, moved.version) == ("champion", 1)
        pulled = registry.pull("cli", tmp_path / "out" / "a.pt2", "champion")
        assert pulled == registry.versions("cli")[0]
        assert sha256((tmp_path / "out" / "a.pt2").read_bytes()) == pulled.digests.archive
        assert_served((tmp_path / "out" / "a.pt2").read_bytes(), archives["conv"])
        latest = registry.pull("cli", tmp_path / "out" / "b.pt2")
        assert latest.version == 2
        assert_served((tmp_path / "out" / "b.pt2").read_bytes(), second.read_bytes())
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.pt2", "b.pt2"]

        with pytest.raises(ClientFailure) as caught:
            registry.versions("nobody")
        assert caught.value.code == "model-not-found"
        with pytest.raises(ClientFailure) as caught:
            registry.set_alias("cli", "latest", 1)
        assert caught.value.code == "invalid-name"
        invalid = tmp_path / "invalid.pt2"
        invalid.write_bytes(
            rewrite_member(
                archives["conv"],
                "models/model.json",
                lambda b: b.replace(b"aten.relu.default", b"aten.relu_nope.default"),
            )
        )
        with pytest.raises(ClientFailure) as caught:
            registry.push("cli", invalid)
        assert caught.value.code == "invalid-program"
        assert [(i.code, i.path) for i in caught.value.issues] == [
            ("operator-unknown", "/graph_module/graph/nodes/1/target")
        ]
        with pytest.raises(ClientFailure) as caught:
            with Client("http://127.0.0.1:9", timeout=5) as unreachable:
                unreachable.versions("cli")
        assert caught.value.code == "server-unreachable"


def test_client_refuses_corrupt_downloads(tmp_path: Path) -> None:
    """A server (or proxy) that sends other bytes than the digest it announced."""
    info = version_answer(sha256(b"right"), 5)

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/archive"):
            return httpx.Response(200, content=b"wrong")
        return httpx.Response(200, json=info)

    lying = Client("http://registry", transport=httpx.MockTransport(answer))
    with lying, pytest.raises(ClientFailure) as caught:
        lying.pull("m", tmp_path / "m.pt2")
    assert caught.value.code == "download-corrupt"
    assert list(tmp_path.iterdir()) == []


def test_odd_inputs_are_client_errors(client: httpx.Client, archives: dict[str, bytes]) -> None:
    base = "/v1/models/odd"
    client.post(f"{base}/versions", content=archives["conv"], headers=ZIP)
    problem(client.get(f"{base}/versions/{'9' * 30}"), 404, "version-not-found")
    problem(client.get(f"{base}/versions/\u00b2"), 422, "invalid-name")
    problem(client.put(f"{base}/aliases/a", json={"version": 2**40}), 422, "request-invalid")
    problem(client.get(f"{base}/versions", params={"after": 2**40}), 422, "request-invalid")
    tag = client.put(f"{base}/versions/1/tags/k", json={"value": "a\u0000b"})
    problem(tag, 422, "invalid-name")
    problem(client.put(f"{base}/versions/1/tags/k", json={"value": ""}), 422, "invalid-name")
    deleted = client.delete(f"{base}/versions/1", params={"reason": "\u0000"})
    problem(deleted, 422, "invalid-name")
    problem(client.get("/v1/models", params={"after": "\u0000"}), 422, "invalid-name")
    problem(client.delete(f"{base}/versions/1/tags/{'k' * 200}"), 422, "invalid-name")
    assert client.get(f"{base}/versions/1").json()["deleted_at"] is None
    # every method of a path, not only those of its first route
    allowed = {
        path: client.options(path).headers["allow"]
        for path in (f"{base}/versions", f"{base}/versions/1", f"{base}/aliases/a", "/v1/models")
    }
    assert allowed == {
        f"{base}/versions": "GET, POST",
        f"{base}/versions/1": "DELETE, GET",
        f"{base}/aliases/a": "DELETE, PUT",
        "/v1/models": "GET",
    }


def test_cli_push_versions_alias_pull(
    served: RegistryServer, archives: dict[str, bytes], tmp_path: Path
) -> None:
    (tmp_path / "conv.pt2").write_bytes(archives["conv"])
    url = ["--url", served.url]
    pushed = run_cli("push", "cli-model", "conv.pt2", *url, cwd=tmp_path)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.startswith("pushed cli-model v1")
    again = run_cli("push", "cli-model", "conv.pt2", *url, cwd=tmp_path)
    assert again.stdout.startswith("already there: cli-model v1")
    aliased = run_cli("alias", "cli-model", "champion", "1", *url, cwd=tmp_path)
    assert aliased.returncode == 0, aliased.stderr
    listed = run_cli("versions", "cli-model", *url, "--json", cwd=tmp_path)
    [only] = orjson.loads(listed.stdout)
    assert (only["version"], only["aliases"]) == (1, ["champion"])
    pulled = run_cli("pull", "cli-model", "out.pt2", "--ref", "champion", *url, cwd=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert_served((tmp_path / "out.pt2").read_bytes(), archives["conv"])
    missing = run_cli("pull", "no-such-model", "x.pt2", *url, cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr.startswith("pt2serde: model-not-found")
    assert not (tmp_path / "x.pt2").exists()
