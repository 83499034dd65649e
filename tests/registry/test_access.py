"""Tokens, permissions and the audit log through a real HTTP server, on SQLite and PostgreSQL.

Every registry route is called by every role (no credentials, an expired and a revoked token,
a token without a grant, read, write, manage, the bootstrap admin) and answers what the role
may; every change those calls make is then found in the audit log exactly once, under its
actor, and nothing else is.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.api.conftest import ROOT
from tests.registry.conftest import (
    RegistryServer,
    make_backend,
    start_registry_server,
    stop_registry_server,
    variant,
    warm,
)

ZIP = {"Content-Type": "application/zip"}
ADMIN_TOKEN = "admin-" + "s3cret-" * 6
#: roles with a token and the level their owner is granted on the model `m`.
GRANTED = {"reader": "read", "writer": "write", "manager": "manage"}
ROLES = ["anonymous", "expired", "revoked", "nobody", "reader", "writer", "manager", "admin"]
#: what a role may do: "any" is any authenticated caller.
RANK = {"nobody": 0, "reader": 1, "writer": 2, "manager": 3, "admin": 4}
NEEDS = {"any": 0, "read": 1, "write": 2, "manage": 3, "admin": 4}
UNAUTHENTICATED = {
    "anonymous": "unauthenticated",
    "expired": "token-expired",
    "revoked": "token-revoked",
}
Change = tuple[str, str, str]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Org:
    """A server with an admin token, users with tokens, grants on `m` and one version of it."""

    server: RegistryServer
    archive: bytes
    tokens: dict[str, str] = field(default_factory=dict)
    #: every change made so far: (actor, action, target)
    changes: list[Change] = field(default_factory=list)
    #: versions the route calls pushed, for the delete calls to remove
    spare: list[int] = field(default_factory=list)
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def client(self, role: str = "admin") -> httpx.Client:
        """The role's client (kept open: connections are reused)."""
        if role not in self.clients:
            client = self.server.client()
            if role != "anonymous":
                client.headers.update(bearer(self.tokens[role]))
            self.clients[role] = client
        return self.clients[role]

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A call as the admin, which must succeed."""
        response = self.client().request(method, path, **kwargs)
        assert response.status_code < 300, response.text
        return response

    def alias(self, alias: str, protected: bool = False) -> None:
        body = {"version": 1, "protected": protected}
        self.admin("PUT", f"/v1/models/m/aliases/{alias}", json=body)
        self.changes.append(("admin", "alias.set", f"models/m/aliases/{alias}"))


def _setup(server: RegistryServer, archive: bytes) -> Org:
    org = Org(server, archive, {"admin": ADMIN_TOKEN})
    for owner in ["nobody", *GRANTED, "expired", "revoked"]:
        body: dict[str, Any] = {"name": f"{owner}'s", "owner": owner}
        if owner == "expired":
            body["expires_at"] = "2020-01-01T00:00:00Z"
        made = org.admin("POST", "/v1/tokens", json=body).json()
        assert made["secret"].startswith("pt2s_")
        assert len(made["secret"]) > 40
        org.tokens[owner] = made["secret"]
        org.changes.append(("admin", "token.create", f"tokens/{made['id']}"))
        if owner == "revoked":
            org.admin("DELETE", f"/v1/tokens/{made['id']}")
            org.changes.append(("admin", "token.revoke", f"tokens/{made['id']}"))
    # expired and revoked tokens belong to managers: their 401 is the token's, not a grant's
    for owner, level in {**GRANTED, "expired": "manage", "revoked": "manage"}.items():
        org.admin("PUT", f"/v1/models/m/permissions/{owner}", json={"level": level})
        org.changes.append(("admin", "permission.set", f"models/m/permissions/{owner}"))
    pushed = org.admin("POST", "/v1/models/m/versions", content=archive, headers=ZIP)
    assert pushed.status_code == 201
    org.changes.append(("admin", "version.push", "models/m/versions/1"))
    return org


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def org(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    archives: dict[str, bytes],
) -> Iterator[Org]:
    """A registry server with authentication on, per backend."""
    backend = make_backend(request, tmp_path_factory.mktemp("access"))
    env = {
        "PT2SERDE_ADMIN_TOKEN": ADMIN_TOKEN,
        "PT2SERDE_DEFAULT_PERMISSION": "none",
        "PT2SERDE_WEBHOOK_ALLOW_PRIVATE": "1",  # _HOOK's loopback receiver
    }
    server = start_registry_server(backend, env)
    try:
        warm(server)
        org = _setup(server, archives["conv"])
        yield org
        for client in org.clients.values():
            client.close()
    finally:
        stop_registry_server(server)


@dataclass
class Call:
    """One request of a case, and the change it makes when allowed."""

    method: str
    path: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: (action, target) of the audit row a success writes; target "" : from the answer
    change: tuple[str, str] | None = None


@dataclass
class Case:
    """A route, the level it needs, and how to call it as a role (after preparing for it)."""

    name: str
    needs: str
    ok: int
    call: Callable[[Org, str, bool], Call]


def _get(path: str) -> Callable[[Org, str, bool], Call]:
    return lambda org, role, allowed: Call("GET", path)


def _push(org: Org, role: str, allowed: bool) -> Call:
    archive = variant(org.archive, 100 + ROLES.index(role))
    return Call(
        "POST", "/v1/models/m/versions", {"content": archive, "headers": ZIP}, ("version.push", "")
    )


def _delete_version(org: Org, role: str, allowed: bool) -> Call:
    number = org.spare.pop() if allowed else 1
    target = f"models/m/versions/{number}"
    return Call(
        "DELETE", f"/v1/{target}", {"params": {"reason": "gone"}}, ("version.delete", target)
    )


def _put_tag(org: Org, role: str, allowed: bool) -> Call:
    target = f"models/m/versions/1/tags/k-{role}"
    return Call("PUT", f"/v1/{target}", {"json": {"value": role}}, ("tag.set", target))


def _delete_tag(org: Org, role: str, allowed: bool) -> Call:
    target = f"models/m/versions/1/tags/d-{role}"
    if allowed:
        org.admin("PUT", f"/v1/{target}", json={"value": "x"})
        org.changes.append(("admin", "tag.set", target))
    return Call("DELETE", f"/v1/{target}", {}, ("tag.delete", target))


def _describe(org: Org, role: str, allowed: bool) -> Call:
    return Call(
        "PUT",
        "/v1/models/m/description",
        {"json": {"description": f"by {role}"}},
        ("model.describe", "models/m"),
    )


def _put_alias(
    alias: str, protected: bool | None, prepared: bool
) -> Callable[[Org, str, bool], Call]:
    def call(org: Org, role: str, allowed: bool) -> Call:
        name = f"{alias}-{role}"
        if prepared:
            org.alias(name, protected=True)
        body: dict[str, Any] = {"version": 1}
        if protected is not None:
            body["protected"] = protected
        target = f"models/m/aliases/{name}"
        return Call("PUT", f"/v1/{target}", {"json": body}, ("alias.set", target))

    return call


def _delete_alias(protected: bool) -> Callable[[Org, str, bool], Call]:
    def call(org: Org, role: str, allowed: bool) -> Call:
        name = f"{'pd' if protected else 'd'}-{role}"
        org.alias(name, protected)
        target = f"models/m/aliases/{name}"
        return Call("DELETE", f"/v1/{target}", {}, ("alias.delete", target))

    return call


def _put_permission(org: Org, role: str, allowed: bool) -> Call:
    target = f"models/m/permissions/p-{role}"
    return Call("PUT", f"/v1/{target}", {"json": {"level": "read"}}, ("permission.set", target))


def _delete_permission(org: Org, role: str, allowed: bool) -> Call:
    target = f"models/m/permissions/q-{role}"
    if allowed:
        org.admin("PUT", f"/v1/{target}", json={"level": "read"})
        org.changes.append(("admin", "permission.set", target))
    return Call("DELETE", f"/v1/{target}", {}, ("permission.delete", target))


def _create_token(org: Org, role: str, allowed: bool) -> Call:
    return Call("POST", "/v1/tokens", {"json": {"name": "ci"}}, ("token.create", ""))


def _revoke_token(own: bool) -> Callable[[Org, str, bool], Call]:
    def call(org: Org, role: str, allowed: bool) -> Call:
        owner = role if own and role in RANK else "someone"
        made = org.admin("POST", "/v1/tokens", json={"name": "to revoke", "owner": owner}).json()
        org.changes.append(("admin", "token.create", f"tokens/{made['id']}"))
        target = f"tokens/{made['id']}"
        return Call("DELETE", f"/v1/{target}", {}, ("token.revoke", target))

    return call


def _blob(org: Org, role: str, allowed: bool) -> Call:
    digest = org.admin("GET", "/v1/models/m/versions/1").json()["digests"]["archive"]
    return Call("GET", f"/v1/blobs/{digest}")


_VERIFY = "/v1/models/m/versions/1/verify"
#: webhooks post to a closed loopback port: their deliveries fail and stay out of the way.
_HOOK = {"url": "http://127.0.0.1:9/hook"}


def _create_webhook(model: str | None) -> Callable[[Org, str, bool], Call]:
    return lambda org, role, allowed: Call(
        "POST", "/v1/webhooks", {"json": {**_HOOK, "model": model}}, ("webhook.create", "")
    )


def _webhook(method: str, suffix: str = "") -> Callable[[Org, str, bool], Call]:
    def call(org: Org, role: str, allowed: bool) -> Call:
        made = org.admin("POST", "/v1/webhooks", json={**_HOOK, "model": "m"}).json()
        target = f"webhooks/{made['id']}"
        org.changes.append(("admin", "webhook.create", target))
        change = ("webhook.delete", target) if method == "DELETE" else None
        return Call(method, f"/v1/webhooks/{made['id']}{suffix}", change=change)

    return call


CASES = [
    Case("whoami", "any", 200, _get("/v1/whoami")),
    Case("list-models", "any", 200, _get("/v1/models")),
    Case("get-model", "read", 200, _get("/v1/models/m")),
    Case("push", "write", 201, _push),
    Case("list-versions", "read", 200, _get("/v1/models/m/versions")),
    Case("get-version", "read", 200, _get("/v1/models/m/versions/1")),
    Case("delete-version", "manage", 200, _delete_version),
    # verified already: answered as it is, nothing changes (test_verification flips one)
    Case("verify", "write", 200, lambda org, role, allowed: Call("POST", _VERIFY)),
    Case("archive", "read", 200, _get("/v1/models/m/versions/1/archive")),
    Case("document", "read", 200, _get("/v1/models/m/versions/1/document")),
    Case("canonical", "read", 200, _get("/v1/models/m/versions/1/canonical")),
    Case("diff", "read", 200, _get("/v1/models/m/versions/1/diff?against=m:1")),
    Case("inspect", "read", 200, _get("/v1/models/m/versions/1/inspect")),
    Case("blob", "read", 200, _blob),
    Case("tensor-stats", "read", 200, _get("/v1/models/m/versions/1/tensors/stats")),
    Case("describe", "write", 200, _describe),
    Case("my-access", "any", 200, _get("/v1/models/m/access")),
    Case("put-tag", "write", 200, _put_tag),
    Case("delete-tag", "write", 200, _delete_tag),
    Case("put-alias", "write", 200, _put_alias("a", None, prepared=False)),
    Case("mark-alias", "manage", 200, _put_alias("mark", True, prepared=False)),
    Case("move-protected-alias", "manage", 200, _put_alias("prot", None, prepared=True)),
    Case("delete-alias", "write", 204, _delete_alias(protected=False)),
    Case("delete-protected-alias", "manage", 204, _delete_alias(protected=True)),
    Case("list-permissions", "manage", 200, _get("/v1/models/m/permissions")),
    Case("put-permission", "manage", 200, _put_permission),
    Case("delete-permission", "manage", 204, _delete_permission),
    Case("model-audit", "manage", 200, _get("/v1/audit?model=m")),
    Case("audit", "admin", 200, _get("/v1/audit")),
    Case("create-token", "any", 201, _create_token),
    Case("list-tokens", "any", 200, _get("/v1/tokens")),
    Case("revoke-own-token", "any", 200, _revoke_token(own=True)),
    Case("revoke-token", "admin", 200, _revoke_token(own=False)),
    Case("search", "any", 200, _get("/v1/search?model=m")),
    Case("create-webhook", "manage", 201, _create_webhook("m")),
    Case("create-global-webhook", "admin", 201, _create_webhook(None)),
    Case("list-webhooks", "any", 200, _get("/v1/webhooks")),
    Case("get-webhook", "manage", 200, _webhook("GET")),
    Case("webhook-deliveries", "manage", 200, _webhook("GET", "/deliveries")),
    Case("delete-webhook", "manage", 204, _webhook("DELETE")),
]


def _audit(org: Org) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    while True:
        page = org.admin("GET", "/v1/audit", params=params).json()
        rows += page["entries"]
        if page["next"] is None:
            return rows
        params["before"] = page["next"]


def test_every_route_answers_every_role(org: Org) -> None:
    seen: list[tuple[str, str, int]] = []
    for case in CASES:
        for role in ROLES:
            allowed = role in RANK and RANK[role] >= NEEDS[case.needs]
            call = case.call(org, role, allowed)
            response = org.client(role).request(call.method, call.path, **call.kwargs)
            seen.append((case.name, role, response.status_code))
            if role in UNAUTHENTICATED:
                assert response.status_code == 401, (case.name, role, response.text)
                assert response.json()["code"] == UNAUTHENTICATED[role]
                assert response.headers["www-authenticate"].startswith("Bearer")
            elif not allowed and case.name == "blob":
                # the same answer as for a digest no version refers to: nothing to tell apart
                unknown = org.client(role).get("/v1/blobs/" + "0" * 64).json()
                digest = call.path.rpartition("/")[2]
                assert response.status_code == 404, (role, response.text)
                assert response.json() == {
                    **unknown,
                    "detail": unknown["detail"].replace("0" * 64, digest),
                }
            elif not allowed:
                assert response.status_code == 403, (case.name, role, response.text)
                assert response.json()["code"] in ("forbidden", "alias-protected")
            else:
                assert response.status_code == case.ok, (case.name, role, response.text)
                if call.change is not None:
                    action, target = call.change
                    target = target or _target_of(action, response.json())
                    org.changes.append((role, action, target))
                    if action == "version.push":
                        org.spare.append(response.json()["version"])
    assert len(seen) == len(CASES) * len(ROLES)
    # the model list shows only models the caller may read
    assert org.client("nobody").get("/v1/models").json()["models"] == []
    listed = org.client("reader").get("/v1/models").json()["models"]
    assert [m["name"] for m in listed] == ["m"]
    # so do search and the webhook list (a model's managers see its webhooks, admins all)
    nobody, reader, manager = (org.client(role) for role in ("nobody", "reader", "manager"))
    assert nobody.get("/v1/search").json()["versions"] == []
    assert nobody.get("/v1/webhooks").json()["webhooks"] == []
    assert {v["model"] for v in reader.get("/v1/search").json()["versions"]} == {"m"}
    assert reader.get("/v1/webhooks").json()["webhooks"] == []
    assert {h["model"] for h in manager.get("/v1/webhooks").json()["webhooks"]} == {"m"}
    # searching one model the caller may not read tells nothing, not even that more match
    probe = "/v1/search?model=m&include_deleted=true&limit=1"
    assert org.admin("GET", probe).json()["next"] is not None
    assert nobody.get(probe).json() == {"versions": [], "next": None}
    # nor does any other filter or the model list: permissions apply before paging
    digest = org.admin("GET", "/v1/models/m/versions/1").json()["digests"]["program"]
    for probe in (
        "/v1/search?pushed_by=admin&include_deleted=true&limit=1",
        "/v1/search?limit=1&include_deleted=true",
        f"/v1/search?program_digest={digest}&include_deleted=true&limit=1",
    ):
        more = org.admin("GET", probe).json()
        assert more["versions"], probe
        assert more["next"] is not None or "program_digest" in probe, probe
        assert nobody.get(probe).json() == {"versions": [], "next": None}, probe
    org.admin("PUT", "/v1/models/m2/permissions/admin", json={"level": "manage"})
    org.changes.append(("admin", "permission.set", "models/m2/permissions/admin"))
    pushed = org.admin("POST", "/v1/models/m2/versions", content=org.archive, headers=ZIP)
    org.changes.append(("admin", "version.push", f"models/m2/versions/{pushed.json()['version']}"))
    assert org.admin("GET", "/v1/models?limit=1").json()["next"] is not None
    assert reader.get("/v1/models?limit=1").json() == {
        "models": reader.get("/v1/models").json()["models"],
        "next": None,
    }

    rows = _audit(org)
    found = Counter((r["actor"], r["action"], r["target"]) for r in rows)
    assert found == Counter(org.changes)
    assert all(r["request_id"] and r["client"] == "127.0.0.1" for r in rows)
    tokens = {r["token_id"] for r in rows if r["actor"] == "admin"}
    assert tokens == {"bootstrap-admin"}


def _target_of(action: str, body: dict[str, Any]) -> str:
    if action == "token.create":
        return f"tokens/{body['id']}"
    if action == "webhook.create":
        return f"webhooks/{body['id']}"
    return f"models/{body['model']}/versions/{body['version']}"


def test_tokens_are_stored_as_hashes_and_shown_once(org: Org) -> None:
    made = org.admin("POST", "/v1/tokens", json={"name": "once"}).json()
    org.changes.append(("admin", "token.create", f"tokens/{made['id']}"))
    listed = [t for t in org.admin("GET", "/v1/tokens").json() if t["id"] == made["id"]]
    assert listed
    assert "secret" not in listed[0]
    assert made["secret"] not in org.admin("GET", "/v1/audit").text
    digest = hashlib.sha256(made["secret"].encode()).hexdigest()
    assert backend_has(org, digest)
    assert not backend_has(org, made["secret"])
    with org.server.client() as client:
        client.headers.update(bearer(made["secret"]))
        assert client.get("/v1/whoami").json()["principal"] == "admin"


def backend_has(org: Org, text: str) -> bool:
    """Whether the database holds `text` in the token table."""
    from sqlalchemy import select

    from app.registry.auth import api_tokens
    from app.registry.db import Database

    assert org.server.backend is not None
    db = Database(org.server.backend.settings())
    try:
        with db.read() as conn:
            values = [v for row in conn.execute(select(api_tokens)) for v in row]
    finally:
        db.close()
    return text in values


def test_the_cli_manages_tokens_and_reads_the_audit_log(org: Org) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PT2SERDE_")}
    env |= {"PYTHONPATH": str(ROOT), "PT2SERDE_URL": org.server.url}

    def cli(*args: str, token: str | None = ADMIN_TOKEN) -> Any:
        run_env = env if token is None else {**env, "PT2SERDE_TOKEN": token}
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", *args, "--json"],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    made = cli("token", "create", "from-cli", "--owner", "reader")
    assert made["secret"].startswith("pt2s_")
    assert made["id"] in {t["id"] for t in cli("token", "list")}
    # --token wins over $PT2SERDE_TOKEN: the reader sees only the reader's tokens
    own = cli("token", "list", "--token", made["secret"])
    assert {t["owner"] for t in own} == {"reader"}
    assert cli("token", "revoke", made["id"])["revoked_at"] is not None
    grants = {g["principal"]: g["level"] for g in cli("permission", "m")}
    assert grants["reader"] == "read"
    assert cli("permission", "m", "p-cli", "write")["level"] == "write"
    page = cli("audit", "--action", "token.revoke", "--limit", "1")
    [entry] = page["entries"]
    assert (entry["actor"], entry["target"]) == ("admin", f"tokens/{made['id']}")
    refused = subprocess.run(
        [sys.executable, "-m", "app.cli", "token", "list"], env=env, capture_output=True, text=True
    )
    assert refused.returncode != 0
    assert refused.stderr.strip() == (
        "pt2serde: unauthenticated: send Authorization: Bearer <token>"
    )


def test_own_access_and_description(org: Org) -> None:
    """Each role reads its own level on `m` (what the UI offers it to do); a description is set,
    shown with the model, removed with null, refused when empty or too long, and audited with
    what it was before and after."""
    levels = {role: org.client(role).get("/v1/models/m/access").json() for role in RANK}
    assert {role: answer["level"] for role, answer in levels.items()} == {
        "nobody": "none",
        "reader": "read",
        "writer": "write",
        "manager": "manage",
        "admin": "manage",
    }
    assert levels["writer"]["principal"] == "writer"
    writer = org.client("writer")
    set_to = writer.put("/v1/models/m/description", json={"description": "a small conv net"})
    assert set_to.status_code == 200, set_to.text
    assert set_to.json()["description"] == "a small conv net"
    assert org.client("reader").get("/v1/models/m").json()["description"] == "a small conv net"
    listed = org.client("reader").get("/v1/models").json()["models"]
    assert listed[0]["description"] == "a small conv net"
    for bad in ("", " ", "x" * 4097):
        refused = writer.put("/v1/models/m/description", json={"description": bad})
        assert refused.status_code in (400, 422), refused.text
        assert refused.headers["content-type"] == "application/problem+json"
    cleared = writer.put("/v1/models/m/description", json={"description": None})
    assert cleared.json()["description"] is None
    # newest first
    rows = [r for r in _audit(org) if r["action"] == "model.describe" and r["actor"] == "writer"]
    assert rows[1]["after"] == {"description": "a small conv net"}
    assert rows[0]["before"] == {"description": "a small conv net"}
    assert rows[0]["after"] is None
