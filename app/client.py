"""The HTTP client the CLI uses against a server (`pt2serde push|pull|versions|alias`).

Every function takes the server's base URL (``http://host:8000``) and raises `ClientFailure`:
with the server's problem code when it answered with one, ``server-unreachable`` when it could
not be reached (or answered without a problem), ``download-corrupt`` when pulled bytes do not
hash to the digest the server gave for them (the client's own codes: app/cli/codes.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx

import schema
from app import files
from app.failure import Failure
from app.registry.records import AliasInfo, Pushed, VersionInfo, VersionPage

DEFAULT_TIMEOUT_S = 600.0
_CHUNK = 1 << 20

#: Told the bytes moved so far and the total (0 when the server did not say), after each chunk.
Progress = Callable[[int, int], None]


class ClientFailure(Failure):
    """A registry request that failed, with the server's problem code where there is one."""


def _url(base: str, *parts: str | int) -> str:
    return base.rstrip("/") + "/v1/" + "/".join(quote(str(p), safe="") for p in parts)


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    response.read()
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        issues = [
            schema.Issue(str(e.get("code")), str(e.get("path")), str(e.get("message")))
            for e in body.get("errors") or []
            if isinstance(e, dict)
        ]
        raise ClientFailure(body["code"], str(body.get("detail", "")), issues)
    raise ClientFailure(
        "server-unreachable",
        f"{response.request.url} answered HTTP {response.status_code} without a problem body",
    )


@contextlib.contextmanager
def _client(timeout: float) -> Iterator[httpx.Client]:
    token = os.environ.get("PT2SERDE_TOKEN", "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, headers=headers) as client:
            yield client
    except httpx.TransportError as exc:
        raise ClientFailure("server-unreachable", f"the registry cannot be reached: {exc}") from exc


def push(
    url: str,
    name: str,
    path: Path,
    *,
    model: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
) -> Pushed:
    """Upload the .pt2 at `path` (streamed) as model `name`'s next version; `created` is False
    when the same program already was a live version (which is returned)."""
    params = {"model": model} if model is not None else {}
    with _client(timeout) as client, path.open("rb") as body:
        size = os.fstat(body.fileno()).st_size
        response = client.post(
            _url(url, "models", name, "versions"),
            content=_chunks(body, size, progress),
            params=params,
            # a length, not chunked encoding: the server refuses an oversized body up front
            headers={"Content-Type": "application/zip", "Content-Length": str(size)},
        )
    _raise_for(response)
    return Pushed(
        version=VersionInfo.model_validate_json(response.content),
        created=response.status_code == 201,
    )


def _chunks(body: BinaryIO, size: int, progress: Progress | None) -> Iterator[bytes]:
    sent = 0
    while chunk := body.read(_CHUNK):
        yield chunk
        sent += len(chunk)
        if progress is not None:
            progress(sent, size)


def pull(
    url: str,
    name: str,
    dest: Path,
    ref: str | int = "latest",
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
) -> VersionInfo:
    """Download a version's .pt2 to `dest` (written whole or not at all, its sha256 checked);
    `ref` is a version number, an alias or ``latest``."""
    with _client(timeout) as client:
        meta = client.get(_url(url, "models", name, "versions", ref))
        _raise_for(meta)
        info = VersionInfo.model_validate_json(meta.content)
        archive = _url(url, "models", name, "versions", info.version, "archive")
        with client.stream("GET", archive) as response:
            _raise_for(response)
            _save(response, dest, info.digests.archive, progress)
    return info


def _save(response: httpx.Response, dest: Path, digest: str, progress: Progress | None) -> None:
    """The body written to `dest` whole or not at all, and only when it hashes to `digest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    hasher = hashlib.sha256()
    length = response.headers.get("content-length", "")
    total = int(length) if length.isdigit() else 0
    received = 0
    with files.atomic_writer(dest) as out:
        for chunk in response.iter_bytes(_CHUNK):
            hasher.update(chunk)
            out.write(chunk)
            received += len(chunk)
            if progress is not None:
                progress(received, total)
        if hasher.hexdigest() != digest:
            raise ClientFailure(
                "download-corrupt",
                f"the downloaded archive hashes to {hasher.hexdigest()}, not {digest}",
            )


def versions(
    url: str, name: str, *, include_deleted: bool = False, timeout: float = DEFAULT_TIMEOUT_S
) -> list[VersionInfo]:
    """Every version of a model in number order (all pages)."""
    found: list[VersionInfo] = []
    after: int | None = None
    with _client(timeout) as client:
        while True:
            params: dict[str, Any] = {"limit": 1000, "include_deleted": include_deleted}
            if after is not None:
                params["after"] = after
            response = client.get(_url(url, "models", name, "versions"), params=params)
            _raise_for(response)
            page = VersionPage.model_validate_json(response.content)
            found += page.versions
            if page.next is None:
                return found
            after = page.next


def alias(
    url: str, name: str, alias: str, version: int, *, timeout: float = DEFAULT_TIMEOUT_S
) -> AliasInfo:
    """Point `alias` (``champion``, ``staging``, ...) at a version of the model, or move it."""
    with _client(timeout) as client:
        response = client.put(
            _url(url, "models", name, "aliases", alias), json={"version": version}
        )
    _raise_for(response)
    return AliasInfo.model_validate_json(response.content)


def call(
    url: str,
    method: str,
    *parts: str | int,
    params: dict[str, Any] | None = None,
    json: Any = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """One JSON request to the service's /v1/<parts>; its decoded answer (None when empty)."""
    with _client(timeout) as client:
        response = client.request(method, _url(url, *parts), params=params, json=json)
    _raise_for(response)
    return response.json() if response.content else None
