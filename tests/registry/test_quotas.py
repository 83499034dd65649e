"""Quotas under concurrent clients, the audit log's atomicity and append-only table, and the
refusal to serve a registry nobody can authenticate to on a non-loopback address."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import exc, func, select, text

from app.jobs.push import prepare
from app.jobs.runners import INLINE
from app.registry.audit import SYSTEM, Actor, audit_log
from app.registry.errors import RegistryFailure
from app.registry.records import Pushed
from app.registry.store import Registry
from tests.api.conftest import ROOT
from tests.registry.conftest import (
    Backend,
    RegistryServer,
    make_backend,
    start_registry_server,
    stop_registry_server,
    variant,
    warm,
)

ZIP = {"Content-Type": "application/zip"}
ADMIN_TOKEN = "quota-admin-" + "x" * 32
CLIENTS = 8


@pytest.fixture(params=["sqlite", "postgresql"])
def plain(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """SQLite or PostgreSQL with local blobs (quotas and the audit log live in the database)."""
    return make_backend(request, tmp_path)


def push(registry: Registry, name: str, archive: bytes, actor: Actor = SYSTEM) -> Pushed:
    """Stage, prepare and push an archive as the route does."""
    staged = registry.blobs.stage_bytes(archive)
    try:
        candidate = prepare(registry, staged.path, INLINE, INLINE)
    finally:
        staged.discard()
    return registry.push(name, candidate, actor)


def _registry(backend: Backend, **settings: Any) -> Registry:
    return Registry(backend.settings(**settings))


def _audit_rows(registry: Registry) -> int:
    with registry.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(audit_log)).scalar_one())


def test_a_failed_change_leaves_no_audit_row(
    plain: Backend, archives: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _registry(plain)
    try:
        push(registry, "m", archives["conv"])
        registry.set_alias("m", "champion", 1)
        before = _audit_rows(registry)
        recorded = Registry._record

        def record_then_fail(self: Registry, conn: Any, change: Any) -> None:
            recorded(self, conn, change)
            raise RuntimeError("the transaction fails after the audit row is written")

        monkeypatch.setattr(Registry, "_record", record_then_fail)
        for change in (
            lambda: registry.set_tag("m", "1", "stage", "prod"),
            lambda: registry.delete_alias("m", "champion"),
            lambda: registry.delete_version("m", "1", "bad", detach_aliases=True),
        ):
            with pytest.raises(RuntimeError):
                change()
        monkeypatch.undo()
        assert _audit_rows(registry) == before
        info = registry.version("m", "1")
        assert (info.tags, info.aliases, info.deleted_at) == ({}, ["champion"], None)
    finally:
        registry.close()


def test_the_audit_log_is_append_only(plain: Backend, archives: dict[str, bytes]) -> None:
    registry = _registry(plain)
    try:
        push(registry, "m", archives["conv"], actor=Actor("ci", request_id="r1", client="::1"))
        for statement in ("UPDATE audit_log SET actor = 'someone'", "DELETE FROM audit_log"):
            with pytest.raises(exc.DBAPIError, match="append-only"), registry.db.write() as conn:
                conn.execute(text(statement))
        with registry.db.read() as conn:
            row = conn.execute(select(audit_log)).one()
        assert (row.actor, row.action, row.target) == ("ci", "version.push", "models/m/versions/1")
        assert (row.request_id, row.client) == ("r1", "::1")
    finally:
        registry.close()


def test_deleting_an_aliased_version_needs_asking(
    plain: Backend, archives: dict[str, bytes]
) -> None:
    registry = _registry(plain)
    try:
        push(registry, "m", archives["conv"])
        registry.set_alias("m", "production", 1, protected=True)
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "version-has-aliases"):
            registry.delete_version("m", "1", "bad")
        assert registry.version("m", "production").deleted_at is None
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "alias-protected"):
            registry.set_alias("m", "production", 1, manage=False)
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "alias-protected"):
            registry.delete_alias("m", "production", manage=False)
        registry.set_alias("m", "other", 1, manage=False)
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "alias-protected"):
            registry.set_alias("m", "other", 1, protected=True, manage=False)
        deleted = registry.delete_version("m", "1", "bad", detach_aliases=True)
        assert deleted.aliases == []
        with registry.db.read() as conn:
            actions = [r.action for r in conn.execute(select(audit_log).order_by(audit_log.c.id))]
        assert actions[-3:] == ["alias.delete", "alias.delete", "version.delete"]
    finally:
        registry.close()


def test_size_quotas(plain: Backend, archives: dict[str, bytes]) -> None:
    registry = _registry(plain)
    try:
        first = push(registry, "m", archives["conv"]).version
    finally:
        registry.close()
    size = first.archive_size
    registry = _registry(plain, quota_tag_value_bytes=8, quota_model_bytes=size + size // 2)
    try:
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "quota-exceeded"):
            push(registry, "m", variant(archives["conv"], 7))
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "quota-exceeded"):
            registry.set_tag("m", "1", "note", "é" * 5)
        assert registry.set_tag("m", "1", "note", "12345678").tags == {"note": "12345678"}
        assert registry.versions("m").versions[-1].version == first.version
    finally:
        registry.close()


# ---------------------------------------------------------------- 8 concurrent clients


@pytest.fixture(params=["sqlite", "postgresql"])
def quota_server(
    request: pytest.FixtureRequest, tmp_path: Path, archives: dict[str, bytes]
) -> Iterator[RegistryServer]:
    """A server with small quotas and authentication on."""
    env = {
        "PT2SERDE_ADMIN_TOKEN": ADMIN_TOKEN,
        "PT2SERDE_WORKERS": "2",
        "PT2SERDE_QUOTA_VERSIONS_PER_HOUR": "2",
        "PT2SERDE_QUOTA_TOKEN_VERSIONS_PER_HOUR": "3",
        "PT2SERDE_QUOTA_ALIASES_PER_MODEL": "5",
        "PT2SERDE_QUOTA_TAGS_PER_VERSION": "5",
    }
    server = start_registry_server(make_backend(request, tmp_path), env)
    try:
        warm(server)
        yield server
    finally:
        stop_registry_server(server)


def _together(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(lambda call: call(), calls))


def test_quotas_hold_under_8_concurrent_clients(
    quota_server: RegistryServer, archives: dict[str, bytes]
) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    clients = [httpx.Client(base_url=quota_server.url, timeout=300, headers=auth) for _ in range(8)]
    bodies = [variant(archives["conv"], i) for i in range(CLIENTS)]
    try:
        # versions per hour of one model: 2
        pushed = _together(
            [
                lambda c=c, b=b: c.post("/v1/models/q/versions", content=b, headers=ZIP)
                for c, b in zip(clients, bodies, strict=True)
            ]
        )
        assert Counter(r.status_code for r in pushed) == {201: 2, 429: 6}
        for refused in (r for r in pushed if r.status_code == 429):
            assert refused.json()["code"] == "rate-limited"
            assert 0 < int(refused.headers["retry-after"]) <= 3600
        # versions per hour of one token (2 used above): 3, across models
        spread = _together(
            [
                lambda c=c, b=b, i=i: c.post(f"/v1/models/s{i}/versions", content=b, headers=ZIP)
                for i, (c, b) in enumerate(zip(clients, bodies, strict=True))
            ]
        )
        assert Counter(r.status_code for r in spread) == {201: 1, 429: 7}
        # aliases per model and tags per version: 5 each, 16 attempts of each
        aliases = _together(
            [
                lambda c=c, i=i: c.put(f"/v1/models/q/aliases/a{i}", json={"version": 1})
                for i in range(16)
                for c in [clients[i % CLIENTS]]
            ]
        )
        tags = _together(
            [
                lambda c=c, i=i: c.put(f"/v1/models/q/versions/1/tags/t{i}", json={"value": "v"})
                for i in range(16)
                for c in [clients[i % CLIENTS]]
            ]
        )
        for answers in (aliases, tags):
            assert Counter(r.status_code for r in answers) == {200: 5, 422: 11}
            assert {r.json()["code"] for r in answers if r.status_code == 422} == {"quota-exceeded"}
        model = clients[0].get("/v1/models/q").json()
        assert (model["version_count"], len(model["aliases"])) == (2, 5)
        assert len(clients[0].get("/v1/models/q/versions/1").json()["tags"]) == 5
    finally:
        for client in clients:
            client.close()


# ---------------------------------------------------------------- secure by default


def test_serving_beyond_loopback_needs_credentials(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PT2SERDE_") or key == "PT2SERDE_WORKERS"
    }
    env |= {"PT2SERDE_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "app.cli", "serve", "--host", "0.0.0.0", "--port", "1"]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    assert "PT2SERDE_ADMIN_TOKEN" in lines[0]
    assert refused.stdout == ""
    short = subprocess.run(
        command, env={**env, "PT2SERDE_ADMIN_TOKEN": "short"}, capture_output=True, text=True
    )
    assert short.returncode != 0
    assert len(short.stderr.splitlines()) == 1
    assert "32 characters" in short.stderr
