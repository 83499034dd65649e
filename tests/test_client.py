"""app.client's Client without a server: its routes are openapi.json's, 503s are retried as the
server asks (and no longer), problem+json answers are typed failures, transfers report progress.

Through the real service: tests/registry/test_client_pipeline.py.
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app import client as client_module
from app.cli.registry import client as cli_client
from app.client import (
    ROUTES,
    Client,
    ClientFailure,
    Conflict,
    Forbidden,
    InvalidProgram,
    NotFound,
    Unavailable,
)
from tests.conftest import ROOT

Handler = Callable[[httpx.Request], httpx.Response]

#: One call of each public method (each request it makes is checked against openapi.json).
CALLS: dict[str, Callable[[Client, Path], object]] = {
    "push": lambda c, tmp: c.push("m", b"PK"),
    "pull": lambda c, tmp: c.pull("m", tmp / "m.pt2", "champion"),
    "version": lambda c, tmp: c.version("m", 3),
    "versions": lambda c, tmp: c.versions("m", include_deleted=True),
    "delete_version": lambda c, tmp: c.delete_version("m", 1, "bad", detach_aliases=True),
    "verify": lambda c, tmp: c.verify("m", 1),
    "diff": lambda c, tmp: c.diff("m", 2, "other:1"),
    "validate": lambda c, tmp: c.validate("m", "latest", "schema"),
    "models": lambda c, tmp: c.models(limit=5),
    "model": lambda c, tmp: c.model("m"),
    "set_tag": lambda c, tmp: c.set_tag("m", 1, "k", "v"),
    "delete_tag": lambda c, tmp: c.delete_tag("m", 1, "k"),
    "aliases": lambda c, tmp: c.aliases("m"),
    "set_alias": lambda c, tmp: c.set_alias("m", "champion", 1, protected=True),
    "delete_alias": lambda c, tmp: c.delete_alias("m", "champion"),
    "search": lambda c, tmp: c.search(
        model="m", tag=["a", "b=c"], verified=False, include_deleted=True
    ),
    "webhooks": lambda c, tmp: c.webhooks("m"),
    "create_webhook": lambda c, tmp: c.create_webhook("https://ci.example/h", model="m"),
    "delete_webhook": lambda c, tmp: c.delete_webhook("w1"),
    "deliveries": lambda c, tmp: c.deliveries("w1"),
    "tokens": lambda c, tmp: c.tokens("alice"),
    "create_token": lambda c, tmp: c.create_token("ci", owner="alice", expires_at="2030-01-01"),
    "revoke_token": lambda c, tmp: c.revoke_token("t1"),
    "permissions": lambda c, tmp: c.permissions("m"),
    "set_permission": lambda c, tmp: c.set_permission("m", "*", "read"),
    "delete_permission": lambda c, tmp: c.delete_permission("m", "bob"),
    "audit": lambda c, tmp: c.audit(model="m", limit=10),
}


def _problem(status: int, code: str, detail: str = "", **extra: Any) -> httpx.Response:
    body = {"type": f"https://pt2serde/problems/{code}", "title": code, "status": status}
    return httpx.Response(
        status,
        json={**body, "code": code, "detail": detail, **extra},
        headers={"Content-Type": "application/problem+json"},
    )


def _client(handler: Handler, **options: Any) -> Client:
    return Client("http://registry/", transport=httpx.MockTransport(handler), **options)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the client asks for, made without waiting."""
    waits: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", waits.append)
    return waits


def _pattern(template: str) -> re.Pattern[str]:
    """The paths a route's template serves ({name} stands for one quoted segment)."""
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")


def _routes(pairs: list[tuple[str, str]]) -> dict[str, re.Pattern[str]]:
    """'METHOD template' -> its pattern."""
    return {f"{method.upper()} {template}": _pattern(template) for method, template in pairs}


def _matching(routes: dict[str, re.Pattern[str]], method: str, path: str) -> list[str]:
    return [
        k for k, pattern in routes.items() if k.startswith(f"{method} ") and pattern.match(path)
    ]


#: What the committed openapi.json serves.
OPENAPI = _routes(
    [
        (method, template)
        for template, operations in orjson.loads((ROOT / "openapi.json").read_bytes())[
            "paths"
        ].items()
        for method in operations
    ]
)


def test_every_route_the_client_calls_is_in_openapi() -> None:
    assert [f"{m} {p}" for m, p in ROUTES.values() if f"{m} {p}" not in OPENAPI] == []


def test_every_method_calls_its_routes_as_openapi_names_them(tmp_path: Path) -> None:
    """Each public method is driven against a transport that records the request and answers
    404: every request made is a route of openapi.json, and together they reach every route of
    ROUTES (so the table names no route the client has stopped calling)."""
    public = {n for n in vars(Client) if not n.startswith("_") and callable(getattr(Client, n))}
    assert sorted(public - {"close"}) == sorted(CALLS)
    seen: list[tuple[str, str]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.raw_path.decode().partition("?")[0]))
        if request.url.path.endswith("/versions/champion"):  # so that pull asks for the archive
            return httpx.Response(200, json=version_answer("0" * 64, 1))
        return _problem(404, "model-not-found", "no model m")

    with _client(record) as registry:
        for name, call in CALLS.items():
            with pytest.raises(NotFound):
                call(registry, tmp_path)
            assert seen, name
    assert [(m, p) for m, p in seen if not _matching(OPENAPI, m, p)] == []
    table = _routes(list(ROUTES.values()))
    reached = {key for method, path in seen for key in _matching(table, method, path)}
    assert sorted(set(table) - reached) == []


def test_a_503_is_retried_after_its_retry_after(slept: list[float]) -> None:
    bodies: list[bytes] = []
    answers = iter(
        [
            httpx.Response(503, headers={"Retry-After": "2"}, json={"code": "service-busy"}),
            httpx.Response(503, headers={"Retry-After": "7"}, json={"code": "service-busy"}),
        ]
    )

    def busy_twice(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        return next(answers, None) or httpx.Response(200, json={"models": [], "next": None})

    with _client(busy_twice) as registry:
        assert registry.models().models == []
    assert slept == [2.0, 7.0]
    assert len(bodies) == 3


def test_a_retried_push_sends_the_whole_body_again(tmp_path: Path, slept: list[float]) -> None:
    archive = tmp_path / "a.pt2"
    archive.write_bytes(b"x" * 3_000_000)
    bodies: list[bytes] = []

    def busy_once(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        if len(bodies) == 1:
            return httpx.Response(503, headers={"Retry-After": "1"})
        return httpx.Response(409, json={"code": "version-has-aliases", "detail": "d"})

    with _client(busy_once) as registry, pytest.raises(Conflict):
        registry.push("m", archive)
    assert [len(b) for b in bodies] == [3_000_000, 3_000_000]
    assert slept == [1.0]


def test_retries_are_bounded_in_count(slept: list[float]) -> None:
    calls: list[int] = []

    def always_busy(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return _problem(503, "service-busy", "too many requests at once")

    with _client(always_busy, retries=3) as registry, pytest.raises(Unavailable) as caught:
        registry.model("m")
    assert len(calls) == 4
    assert slept == [0.5, 1.0, 2.0]  # no Retry-After: a backoff doubling from half a second
    assert (caught.value.code, caught.value.status) == ("service-busy", 503)
    assert caught.value.detail == "too many requests at once"


def test_retries_are_bounded_in_time(slept: list[float]) -> None:
    """A Retry-After past the budget is not waited for: the 503 is the answer."""
    calls: list[int] = []

    def later(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(
            503, headers={"Retry-After": "3600"}, json={"code": "server-stopping", "detail": "x"}
        )

    with _client(later, retry_budget_s=60) as registry, pytest.raises(Unavailable) as caught:
        registry.model("m")
    assert (len(calls), slept, caught.value.code) == (1, [], "server-stopping")


def test_retry_after_as_an_http_date(slept: list[float]) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    answers = iter([httpx.Response(503, headers={"Retry-After": when})])

    def dated(request: httpx.Request) -> httpx.Response:
        return next(answers, None) or httpx.Response(200, json={"models": [], "next": None})

    with _client(dated) as registry:
        registry.models()
    [waited] = slept
    assert 28 < waited <= 30


def test_other_statuses_are_not_retried(slept: list[float]) -> None:
    calls: list[int] = []

    def failing(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return _problem(500, "internal-error", "a bug")

    with _client(failing) as registry, pytest.raises(ClientFailure) as caught:
        registry.model("m")
    assert (len(calls), slept, type(caught.value)) == (1, [], ClientFailure)


@pytest.mark.parametrize(
    ("status", "code", "family"),
    [
        (401, "unauthenticated", Forbidden),
        (403, "forbidden", Forbidden),
        (404, "version-not-found", NotFound),
        (409, "version-has-aliases", Conflict),
        (422, "invalid-program", InvalidProgram),
        (429, "rate-limited", Unavailable),
        (413, "payload-too-large", ClientFailure),
    ],
)
def test_problems_are_typed_failures(
    status: int, code: str, family: type[ClientFailure], slept: list[float]
) -> None:
    errors = [{"code": "operator-unknown", "path": "/graph/nodes/1", "message": "no op x"}]

    def refusing(request: httpx.Request) -> httpx.Response:
        return _problem(status, code, "what went wrong", errors=errors)

    with _client(refusing) as registry, pytest.raises(ClientFailure) as caught:
        registry.version("m", 1)
    failure = caught.value
    assert type(failure) is family
    assert (failure.code, failure.status, failure.detail) == (code, status, "what went wrong")
    assert [(i.code, i.path, i.message) for i in failure.issues] == [
        ("operator-unknown", "/graph/nodes/1", "no op x")
    ]
    assert str(failure) == f"{code}: what went wrong"


def test_an_answer_without_a_problem_is_server_unreachable() -> None:
    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>bad gateway</html>")

    with _client(proxy) as registry, pytest.raises(ClientFailure) as caught:
        registry.model("m")
    assert (caught.value.code, caught.value.status) == ("server-unreachable", 502)
    assert caught.value.detail == (
        "http://registry/v1/models/m answered HTTP 502 without a problem body"
    )


def test_no_answer_is_server_unreachable() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with _client(refused) as registry, pytest.raises(ClientFailure) as caught:
        registry.model("m")
    assert (caught.value.code, caught.value.status) == ("server-unreachable", None)
    assert caught.value.detail == "the registry cannot be reached: connection refused"


def test_path_parts_are_quoted_and_the_token_sent() -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _problem(404, "alias-not-found")

    registry = Client("http://h:1/base/", "s3cret", transport=httpx.MockTransport(record))
    with registry, pytest.raises(NotFound):
        registry.delete_alias("a/b", "x y")
    [request] = seen
    assert request.url.raw_path == b"/base/v1/models/a%2Fb/aliases/x%20y"
    assert request.headers["authorization"] == "Bearer s3cret"
    with Client("http://h:1", transport=httpx.MockTransport(record)) as anonymous:
        with pytest.raises(NotFound):
            anonymous.model("m")
    assert "authorization" not in seen[-1].headers


def test_push_and_pull_report_progress(tmp_path: Path) -> None:
    archive = b"z" * (2 * (1 << 20) + 5)
    digest = hashlib.sha256(archive).hexdigest()
    version = version_answer(digest, len(archive))

    def registry_of_one(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            assert request.read() == archive
            assert request.headers["content-length"] == str(len(archive))
            return httpx.Response(201, json={**version, "warnings": []})
        if request.url.path.endswith("/archive"):
            return httpx.Response(200, content=archive)
        return httpx.Response(200, json=version)

    sent: list[tuple[int, int]] = []
    received: list[tuple[int, int]] = []
    with _client(registry_of_one) as registry:
        pushed = registry.push(
            "m", archive, progress=lambda done, total: sent.append((done, total))
        )
        info = registry.pull(
            "m", tmp_path / "m.pt2", progress=lambda done, total: received.append((done, total))
        )
    assert (pushed.created, pushed.version.version, pushed.warnings) == (True, 1, [])
    assert info.digests.archive == digest
    assert (tmp_path / "m.pt2").read_bytes() == archive
    total = len(archive)
    assert sent == [(1 << 20, total), (2 << 20, total), (total, total)]
    assert received[-1] == (total, total)
    assert [done for done, _ in received] == sorted({done for done, _ in received})


def version_answer(digest: str, size: int) -> dict[str, Any]:
    """A server's answer for version 1 of model `m` whose archive has this digest and size."""
    return {
        "model": "m",
        "version": 1,
        "digests": {"program": "p", "graph": "g", "weights": "w", "archive": digest},
        "archive_size": size,
        "archive_model": "model",
        "schema_version": "8.20",
        "min_schema_version": "8.20",
        "readable_by": [],
        "summary": {
            "inputs": [],
            "outputs": [],
            "parameter_count": 0,
            "parameters": 0,
            "buffers": 0,
            "constants": 0,
            "nodes": 0,
        },
        "verification": {"state": "verified", "torch": "2.13.0"},
        "created_at": "2024-01-01T00:00:00Z",
        "tags": {},
        "aliases": [],
    }


def test_a_bare_host_and_port_is_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """`127.0.0.1:8300`, as the CLI's help writes its default, names the service over http, in
    the Client and in the CLI's $PT2SERDE_URL (which httpx alone refuses: no scheme)."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _problem(404, "model-not-found")

    with Client("127.0.0.1:8300/", transport=httpx.MockTransport(record)) as bare:
        with pytest.raises(NotFound):
            bare.model("m")
    assert str(seen[0].url) == "http://127.0.0.1:8300/v1/models/m"
    assert Client("https://h:1").url == "https://h:1"
    monkeypatch.setenv("PT2SERDE_URL", "127.0.0.1:8300")
    assert cli_client(argparse.Namespace(url=None, token=None)).url == "http://127.0.0.1:8300"
    assert cli_client(argparse.Namespace(url="h:9", token=None)).url == "http://h:9"
