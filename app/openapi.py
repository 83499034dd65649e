"""Print the service's OpenAPI document (`make openapi` writes it to openapi.json)."""

from __future__ import annotations

import sys

import orjson

from app.main import create_app


def openapi_bytes() -> bytes:
    """The OpenAPI document as stable, indented JSON."""
    return orjson.dumps(create_app().openapi(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)


if __name__ == "__main__":
    sys.stdout.buffer.write(openapi_bytes() + b"\n")
