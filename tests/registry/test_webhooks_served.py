"""Webhooks through the real server: subscribe over HTTP, change the registry, SIGKILL the
server while deliveries are in flight, restart it, and find every event delivered at least once
under its original id, every signature valid."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import select

from app.registry import webhooks as hooks
from app.registry.destinations import Destinations
from app.registry.outbox import events
from app.registry.store import Registry
from tests.registry.conftest import (
    Backend,
    kill_server,
    start_registry_server,
    stop_registry_server,
)
from tests.registry.databases import ON_DATABASES
from tests.registry.receiver import Received, receiver
from tests.registry.test_store import push

pytestmark = ON_DATABASES


#: Short leases and polls so that a dead server's claims come free within the test.
#: the receiver listens on loopback, which an operator has to allow
LOOPBACK_OK = {"webhook_allow_private": True}
WEBHOOK_ENV = {
    "PT2SERDE_WEBHOOK_ALLOW_PRIVATE": "1",
    "PT2SERDE_WEBHOOK_LEASE_S": "2",
    "PT2SERDE_WEBHOOK_POLL_S": "0.1",
    "PT2SERDE_WEBHOOK_BACKOFF_S": "0.2",
    "PT2SERDE_WEBHOOK_TIMEOUT_S": "30",
}


def _outbox(backend: Backend) -> list[tuple[str, str]]:
    registry = Registry(backend.settings())
    try:
        with registry.db.read() as conn:
            rows = conn.execute(select(events.c.id, events.c.kind).order_by(events.c.created_at))
            return [(r.id, r.kind) for r in rows]
    finally:
        registry.close()


def test_a_killed_server_loses_no_event(
    backend: Backend, archives: dict[str, bytes], tmp_path: Path
) -> None:
    release = threading.Event()

    def hold(_: Received) -> int:
        # the server dies while this request waits; its answer then never counts
        release.wait(30)
        return 503

    with receiver() as sink:
        registry = Registry(backend.settings())
        try:
            allowing = Destinations(registry.settings.model_copy(update=LOOPBACK_OK))
            created = hooks.create(registry.db, sink.url, None, None, destinations=allowing)
            push(registry, "m", archives["conv"])
        finally:
            registry.close()
        sink.secrets.append(created.secret)
        sink.answer = hold
        server = start_registry_server(backend, WEBHOOK_ENV)
        try:
            with server.client(timeout=30) as client:
                for key in ("stage", "owner"):
                    put = client.put(f"/v1/models/m/versions/1/tags/{key}", json={"value": "a"})
                    assert put.status_code == 200, put.text
                assert client.put("/v1/models/m/aliases/champion", json={"version": 1}).is_success
                assert client.delete("/v1/models/m/versions/1/tags/owner").is_success
            sink.wait_for(lambda s: s.arrivals >= 1, 30)
        finally:
            kill_server(server)
        release.set()
        sink.wait_for(lambda s: len(s.received) == s.arrivals, 10)
        before_kill = {r.event_id: r.raw for r in sink.received}
        outbox = _outbox(backend)
        assert [kind for _, kind in outbox] == [
            "version.created",
            *["tag.changed"] * 2,
            "alias.moved",
            "tag.changed",
        ]
        sink.answer = lambda _: 200
        server = start_registry_server(backend, WEBHOOK_ENV)
        try:
            sink.wait_for(lambda s: set(s.delivered()) == {i for i, _ in outbox}, 60)
            # the server records a delivery once it has read the receiver's answer, a moment
            # after the receiver counted it: read until every one is recorded, or 20 s
            with httpx.Client(base_url=server.url, timeout=30) as client:
                deadline = time.monotonic() + 20
                while True:
                    page = client.get(f"/v1/webhooks/{created.id}/deliveries").json()
                    statuses = {d["status"] for d in page["deliveries"]}
                    if statuses == {"delivered"} or time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
        finally:
            stop_registry_server(server)
    assert sink.bad_signatures == []
    delivered = sink.delivered()
    for event_id, kind in outbox:
        got = delivered[event_id]
        assert (got.body["id"], got.kind, got.body["type"]) == (event_id, kind, kind)
        if event_id in before_kill:
            assert got.raw == before_kill[event_id]  # the same event, byte for byte
    assert before_kill
    assert {d["event_id"]: d["status"] for d in page["deliveries"]} == {
        i: "delivered" for i, _ in outbox
    }
    assert all(d["attempts"] >= 2 for d in page["deliveries"] if d["event_id"] in before_kill)
    alias = next(r for r in delivered.values() if r.kind == "alias.moved")
    assert alias.body["model"] == "m"
    assert alias.body["data"]["after"]["version"] == 1
