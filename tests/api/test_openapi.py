"""openapi.json is generated from the app and documents every route's answers."""

from __future__ import annotations

import orjson

from app.http.problems import PROBLEM_MEDIA_TYPE
from app.openapi import openapi_bytes
from tests.conftest import ROOT


def test_openapi_json_is_current() -> None:
    committed = (ROOT / "openapi.json").read_bytes()
    assert committed == openapi_bytes() + b"\n", "openapi.json is stale: run `make openapi`"


def test_every_operation_documents_problems() -> None:
    spec = orjson.loads(openapi_bytes())
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert any(code.startswith("2") for code in responses), (method, path)
            if method == "post":
                problems = [
                    r
                    for code, r in responses.items()
                    if code.startswith("4") and PROBLEM_MEDIA_TYPE in r.get("content", {})
                ]
                assert problems, f"{method} {path} documents no problem responses"
