"""Identities in process: the open default, a trusted proxy's header, the stateless operations'
gate, and the bootstrap admin token's rotation and retirement."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.main import create_app
from app.registry.auth import BOOTSTRAP_ID
from app.registry.errors import RegistryFailure
from app.registry.store import Registry
from app.settings import Settings

ADMIN = "bootstrap-" + "a" * 32


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Any]:
    """Clients of in-process apps on one SQLite registry, each with its own settings."""
    opened: list[TestClient] = []

    def make(**settings: Any) -> TestClient:
        client = TestClient(create_app(Settings(data_dir=tmp_path / "data", **settings)))
        opened.append(client.__enter__())
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def test_without_configuration_everyone_is_the_anonymous_admin(make_client: Any) -> None:
    client = make_client()
    me = client.get("/v1/whoami").json()
    assert me == {
        "principal": "anonymous",
        "token_id": None,
        "admin": True,
        "authentication": False,
    }
    put = client.put("/v1/models/m/permissions/alice", json={"level": "read"})
    assert put.status_code == 200
    assert put.headers["x-request-id"]
    rows = client.get("/v1/audit", headers={"X-Request-ID": "req-42"})
    assert rows.headers["x-request-id"] == "req-42"
    [entry] = rows.json()["entries"]
    assert (entry["actor"], entry["action"], entry["after"]) == (
        "anonymous",
        "permission.set",
        {"level": "read"},
    )
    assert entry["request_id"] == put.headers["x-request-id"]


def test_a_trusted_proxy_names_the_user(make_client: Any) -> None:
    client = make_client(identity_header="X-Forwarded-User", admin_users=("boss",))
    assert client.get("/v1/whoami").status_code == 401
    alice = {"X-Forwarded-User": "alice"}
    assert client.get("/v1/whoami", headers=alice).json()["principal"] == "alice"
    assert client.get("/v1/models", headers=alice).status_code == 200
    denied = client.put("/v1/models/m/permissions/alice", json={"level": "manage"}, headers=alice)
    assert (denied.status_code, denied.json()["code"]) == (403, "forbidden")
    boss = {"X-Forwarded-User": "boss"}
    assert client.get("/v1/whoami", headers=boss).json()["admin"] is True
    made = client.put("/v1/models/m/permissions/alice", json={"level": "manage"}, headers=boss)
    assert made.status_code == 200
    assert client.get("/v1/models/m/permissions", headers=alice).status_code == 200
    # a token of one's own, then used instead of the header
    token = client.post("/v1/tokens", json={"name": "laptop"}, headers=alice).json()
    assert token["owner"] == "alice"
    me = client.get("/v1/whoami", headers={"Authorization": f"Bearer {token['secret']}"})
    assert (me.json()["principal"], me.json()["token_id"]) == ("alice", token["id"])
    refused = client.post("/v1/tokens", json={"name": "x", "admin": True}, headers=alice)
    assert refused.status_code == 403


def test_a_proxy_user_cannot_take_the_services_own_names(make_client: Any) -> None:
    client = make_client(
        identity_header="X-Forwarded-User", admin_token=SecretStr(ADMIN), admin_users=("boss",)
    )
    for name in ("admin", "system", "anonymous", "x" * 129, "-x", "alice bob"):
        who = {"X-Forwarded-User": name}
        answer = client.get("/v1/whoami", headers=who)
        assert (name, answer.status_code, answer.json()["code"]) == (name, 401, "unauthenticated")
        # the bootstrap admin token's owner is "admin": such a user would list and revoke it
        revoked = client.delete(f"/v1/tokens/{BOOTSTRAP_ID}", headers=who)
        assert revoked.status_code == 401
    bootstrap = {"Authorization": f"Bearer {ADMIN}"}
    assert client.get("/v1/whoami", headers=bootstrap).json()["admin"] is True
    # an operator who names "admin" an admin user means it
    other = make_client(identity_header="X-Forwarded-User", admin_users=("admin",))
    me = other.get("/v1/whoami", headers={"X-Forwarded-User": "admin"}).json()
    assert (me["principal"], me["admin"]) == ("admin", True)


def test_stateless_operations_follow_the_setting(make_client: Any) -> None:
    gated = make_client(admin_token=SecretStr(ADMIN), stateless_access="token")
    refused = gated.post("/v1/validate", content=b"{}")
    assert (refused.status_code, refused.json()["code"]) == (401, "unauthenticated")
    allowed = gated.post(
        "/v1/validate", content=b"{}", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert allowed.status_code not in (401, 403)
    assert gated.get("/v1/models").status_code == 401
    assert gated.get("/healthz").status_code == 200
    opened = make_client(admin_token=SecretStr(ADMIN))
    assert opened.post("/v1/validate", content=b"{}").status_code not in (401, 403)


def test_the_bootstrap_token_rotates_and_retires(tmp_path: Path) -> None:
    def open_with(token: str) -> Registry:
        return Registry(Settings(data_dir=tmp_path, admin_token=SecretStr(token)))

    first = open_with(ADMIN)
    assert first.access.authenticate(ADMIN).admin
    first.close()
    rotated = "rotated-" + "b" * 32
    second = open_with(rotated)
    with pytest.raises(RegistryFailure, check=lambda e: e.code == "unauthenticated"):
        second.access.authenticate(ADMIN)
    assert second.access.authenticate(rotated).principal == "admin"
    second.close()
    retired = open_with("")
    try:
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "token-revoked"):
            retired.access.authenticate(rotated)
        assert retired.access.token(BOOTSTRAP_ID).revoked_at is not None
    finally:
        retired.close()
    with pytest.raises(ValueError, match="32 characters"):
        Registry(Settings(data_dir=tmp_path, admin_token=SecretStr("short")))


def test_a_token_mints_no_token_that_outlives_it(make_client: Any) -> None:
    client = make_client(admin_token=SecretStr(ADMIN))
    admin = {"Authorization": f"Bearer {ADMIN}"}
    soon = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    parent = client.post(
        "/v1/tokens",
        json={"name": "ci", "owner": "alice", "expires_at": soon.isoformat()},
        headers=admin,
    )
    assert parent.status_code == 201
    alice = {"Authorization": f"Bearer {parent.json()['secret']}"}

    def minted(expires_at: datetime | None) -> datetime:
        body: dict[str, Any] = {"name": "child"}
        if expires_at is not None:
            body["expires_at"] = expires_at.isoformat()
        answer = client.post("/v1/tokens", json=body, headers=alice)
        assert answer.status_code == 201, answer.text
        return datetime.fromisoformat(answer.json()["expires_at"])

    assert minted(None) == soon
    assert minted(soon + timedelta(days=30)) == soon
    earlier = soon - timedelta(minutes=30)
    assert minted(earlier) == earlier
    # a token without an expiry (the bootstrap admin's) leaves the asked expiry as it is
    lasting = client.post("/v1/tokens", json={"name": "forever"}, headers=admin).json()
    assert lasting["expires_at"] is None


def test_times_without_an_offset_and_unresolvable_hosts_are_coded_refusals(
    make_client: Any,
) -> None:
    client = make_client()
    mixed = client.get(
        "/v1/search",
        params={"created_after": "2026-01-01T00:00:00", "created_before": "2026-02-01T00:00:00Z"},
    )
    assert (mixed.status_code, mixed.json()["code"]) == (422, "request-invalid")
    assert mixed.json()["errors"][0]["path"] == "/query/created_after"
    aware = {"created_after": "2026-01-01T00:00:00+01:00", "created_before": "2026-02-01T00:00Z"}
    assert client.get("/v1/search", params=aware).json() == {"versions": [], "next": None}
    naive = client.post("/v1/tokens", json={"name": "t", "expires_at": "2030-01-01T00:00:00"})
    assert (naive.status_code, naive.json()["code"]) == (422, "request-invalid")
    for url in ("https://a..b/", "https://" + "x" * 64 + ".example/", "http://.example/"):
        hook = client.post("/v1/webhooks", json={"url": url, "events": ["version.created"]})
        assert (hook.status_code, hook.json()["code"]) == (422, "invalid-webhook"), url
    assert client.get("/v1/webhooks").json() == {"webhooks": []}


def test_another_sites_page_cannot_act_as_the_proxied_user(make_client: Any) -> None:
    client = make_client(identity_header="X-Forwarded-User", admin_users=("boss",))
    boss = {"X-Forwarded-User": "boss"}
    grant = {"level": "manage"}
    # a form posted by a page on another origin: the browser adds these, the proxy the user
    for forged in (
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
        {"Sec-Fetch-Site": "same-site", "Origin": "https://other.testserver"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
    ):
        answer = client.put("/v1/models/m/permissions/eve", json=grant, headers={**boss, **forged})
        assert (answer.status_code, answer.json()["code"]) == (403, "cross-origin-refused")
    assert client.get("/v1/models/m/permissions", headers=boss).json() == []
    assert client.get("/v1/audit", headers=boss).json()["entries"] == []
    # reads from anywhere, the UI's own requests, and clients that are not browsers pass
    cross = {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
    assert client.get("/v1/whoami", headers={**boss, **cross}).status_code == 200
    for fine in ({"Sec-Fetch-Site": "same-origin"}, {"Origin": "http://testserver"}, {}):
        answer = client.put("/v1/models/m/permissions/eve", json=grant, headers={**boss, **fine})
        assert answer.status_code == 200, (fine, answer.text)
    # a bearer token is not ambient: it is sent only by code that holds it
    made = client.post("/v1/tokens", json={"name": "ci", "admin": True}, headers=boss)
    token = made.json()["secret"]
    bearer = {"Authorization": f"Bearer {token}", **cross}
    assert client.put("/v1/models/m/permissions/eve", json=grant, headers=bearer).status_code == 200


def test_the_open_loopback_registry_refuses_changes_from_other_sites(make_client: Any) -> None:
    client = make_client()
    forged = {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
    answer = client.put("/v1/models/m/permissions/eve", json={"level": "read"}, headers=forged)
    assert (answer.status_code, answer.json()["code"]) == (403, "cross-origin-refused")
    assert client.get("/v1/audit").json()["entries"] == []
