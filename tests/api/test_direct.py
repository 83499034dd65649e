"""The direct route of POST /v1/validate (app.api.direct): it answers small JSON requests
exactly as the FastAPI route does, and leaves every other request to that route."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.routing import Match

from app.api import direct
from app.api.direct import DirectValidate
from app.main import create_app
from app.settings import Settings
from tests.zoo import PROGRAM_NAMES, ZooProgram, torch_json

JSON = {"Content-Type": "application/json"}
SETTINGS = Settings(document_workers=1, workers=1, document_workers_at_start=False)


@pytest.fixture(scope="module")
def document(zoo: dict[str, ZooProgram]) -> bytes:
    return torch_json(zoo[PROGRAM_NAMES[0]].ep)


def _without_direct_route(app: FastAPI) -> FastAPI:
    app.router.routes[:] = [r for r in app.router.routes if not isinstance(r, DirectValidate)]
    return app


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[TestClient, TestClient]]:
    """The service as built, and the same service without its direct route."""
    with (
        TestClient(create_app(SETTINGS)) as built,
        TestClient(_without_direct_route(create_app(SETTINGS))) as plain,
    ):
        yield built, plain


@pytest.fixture
def direct_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The levels of the requests the direct route answered."""
    calls: list[str] = []
    real = direct.validated

    async def spy(request: Any, level: str, model: str | None) -> Any:
        calls.append(level)
        return await real(request, level, model)  # type: ignore[arg-type]

    monkeypatch.setattr(direct, "validated", spy)
    return calls


def _invalid(document: bytes) -> bytes:
    doc = orjson.loads(document)
    doc["graph_module"]["graph"]["nodes"][0]["target"] = 7
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    ("query", "body", "status"),
    [
        ("?level=semantic", "valid", 200),
        ("", "valid", 200),
        ("?level=schema&other=1", "valid", 200),
        ("?level=semantic&model=nope", "valid", 422),
        ("?level=semantic", "invalid", 200),
        ("?level=semantic", "not json", 422),
        ("?level=semantic", "empty", 400),
    ],
)
def test_the_direct_route_answers_as_the_fastapi_route(
    clients: tuple[TestClient, TestClient],
    document: bytes,
    direct_calls: list[str],
    query: str,
    body: str,
    status: int,
) -> None:
    content = {
        "valid": document,
        "invalid": _invalid(document),
        "not json": b'{"graph_module": ',
        "empty": b"",
    }[body]
    built, plain = clients
    ours = built.post(f"/v1/validate{query}", content=content, headers=JSON)
    assert direct_calls, "the direct route did not answer"
    theirs = plain.post(f"/v1/validate{query}", content=content, headers=JSON)
    assert len(direct_calls) == 1, "the FastAPI route's answer came from the direct route"
    assert ours.status_code == theirs.status_code
    assert ours.status_code == status, ours.text
    assert ours.headers == theirs.headers
    assert ours.content == theirs.content
    if body == "invalid":
        assert ours.json()["valid"] is False


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("?level=bogus", "a level out of range"),
        ("?level=semantic&level=schema", "a parameter repeated"),
        ("?model=", "an empty parameter"),
    ],
)
def test_requests_it_would_answer_otherwise_go_to_the_fastapi_route(
    clients: tuple[TestClient, TestClient],
    document: bytes,
    direct_calls: list[str],
    query: str,
    reason: str,
) -> None:
    built, plain = clients
    ours = built.post(f"/v1/validate{query}", content=document, headers=JSON)
    theirs = plain.post(f"/v1/validate{query}", content=document, headers=JSON)
    assert direct_calls == [], reason
    assert (ours.status_code, ours.content) == (theirs.status_code, theirs.content)


def _scope(**changes: Any) -> dict[str, Any]:
    headers = changes.pop("headers", {"content-type": "application/json", "content-length": "9"})
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/validate",
        "root_path": "",
        "query_string": b"level=semantic",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }
    return scope | changes


@pytest.mark.parametrize(
    ("scope", "settings"),
    [
        (_scope(method="GET"), SETTINGS),
        (_scope(path="/v1/validate/"), SETTINGS),
        (_scope(root_path="/api"), SETTINGS),
        (_scope(headers={"content-type": "application/zip", "content-length": "9"}), SETTINGS),
        (_scope(headers={"content-type": "multipart/form-data; boundary=x"}), SETTINGS),
        (_scope(headers={"content-type": "application/json"}), SETTINGS),  # no length: chunked
        (_scope(headers={"content-type": "application/json", "content-length": "10"}), SETTINGS),
        (_scope(), Settings(stateless_access="token", admin_token="t" * 32)),
    ],
)
def test_it_declines_other_media_sizes_methods_paths_and_a_token_gate(
    scope: dict[str, Any], settings: Settings
) -> None:
    route = DirectValidate(settings, inline_bytes=9)
    assert route.matches(_scope())[0] is Match.FULL or settings is not SETTINGS
    assert route.matches(scope)[0] is Match.NONE
