"""Every answer says `nosniff`; the API pages carry a Content-Security-Policy that allows their
CDN and exactly their own inline scripts, and forbids framing."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data: Path = tmp_path_factory.mktemp("data")
    with TestClient(create_app(Settings(data_dir=data))) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/healthz", 200),
        ("GET", "/v1/schema/versions", 200),
        ("GET", "/no/such/route", 404),
        ("POST", "/v1/validate?level=schema", 415),
        ("GET", "/v1/models/nope/versions", 404),
        ("GET", "/ui/", 200),
        ("GET", "/docs", 200),
        ("GET", "/redoc", 404),
        ("GET", "/docs/assets/swagger-ui.css", 200),
        ("GET", "/openapi.json", 200),
    ],
)
def test_every_answer_says_nosniff(client: TestClient, method: str, path: str, status: int) -> None:
    answer = client.request(method, path, content=b"x", headers={"Content-Type": "text/plain"})
    assert answer.status_code == status, answer.text[:300]
    assert answer.headers.get_list("x-content-type-options") == ["nosniff"]


def test_the_api_page_allows_its_own_scripts_only(client: TestClient) -> None:
    answer = client.get("/docs")
    policy = dict(
        part.strip().split(" ", 1) for part in answer.headers["content-security-policy"].split(";")
    )
    assert policy["frame-ancestors"] == "'none'"
    assert policy["default-src"] == "'none'"
    scripts = policy["script-src"].split()
    assert "'unsafe-inline'" not in scripts
    inline = re.findall(r"<script>(.*?)</script>", answer.text, re.DOTALL)
    hashes = {
        f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in inline
    }
    assert hashes == {s for s in scripts if s.startswith("'sha256-")}
    # Swagger UI is served by the service: the page links no other origin, the policy allows none
    assert re.findall(r'(?:src|href)="([^"]+)"', answer.text) == [
        "/docs/assets/swagger-ui.css",
        "/docs/assets/favicon-32x32.png",
        "/docs/assets/swagger-ui-bundle.js",
    ]
    assert [s for s in scripts if "://" in s] == []
