"""Webhook outbox and dispatcher on both backends: signed deliveries to a loopback receiver,
subscription filters, retries with backoff, attempts recorded, exclusive claims and leases."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from app.registry import webhooks as hooks
from app.registry.audit import SYSTEM, Actor, AuditQuery, entries
from app.registry.db import now
from app.registry.destinations import Destinations
from app.registry.errors import RegistryFailure
from app.registry.outbox import attempts, claim, deliveries, record
from app.registry.records import CreatedSubscription, EventKind
from app.registry.store import Registry
from tests.registry.databases import ON_DATABASES
from tests.registry.receiver import Receiver, receiver, verify


def _record(registry: Registry, *events: tuple[EventKind, str]) -> list[str]:
    with registry.db.write() as conn:
        return [record(conn, kind, model, {"n": i}) for i, (kind, model) in enumerate(events)]


def _drain(dispatcher: hooks.Dispatcher, rounds: int = 1) -> int:
    async def go() -> int:
        async with httpx.AsyncClient(timeout=5) as client:
            return sum([await dispatcher.drain_once(client) for _ in range(rounds)])

    return asyncio.run(go())


#: the receivers of these tests listen on loopback, which an operator has to allow
_LOOPBACK_OK: dict[str, Any] = {"webhook_allow_private": True}


def _dispatcher(registry: Registry, **settings: Any) -> hooks.Dispatcher:
    allowed = {**_LOOPBACK_OK, **settings}
    return hooks.Dispatcher(registry.db, registry.settings.model_copy(update=allowed))


def _create(registry: Registry, url: str, *args: Any) -> CreatedSubscription:
    allowing = Destinations(registry.settings.model_copy(update=_LOOPBACK_OK))
    return hooks.create(registry.db, url, *args, destinations=allowing)


def _subscribe(registry: Registry, sink: Receiver, **kwargs: Any) -> CreatedSubscription:
    created = _create(registry, sink.url, kwargs.get("events"), kwargs.get("model"))
    sink.secrets.append(created.secret)
    return created


def test_signature_is_hmac_over_timestamp_and_body() -> None:
    body = b'{"id":"x"}'
    header = hooks.sign("whsec_k", 1_700_000_000, body)
    mac = hmac.new(b"whsec_k", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={mac}"
    assert not verify("whsec_k", header, body)  # far too old: a replay
    assert not verify("other", hooks.sign("whsec_k", 2**31, body), body)


@ON_DATABASES
def test_deliveries_are_signed_filtered_and_recorded(registry: Registry) -> None:
    with receiver() as sink:
        everything = _subscribe(registry, sink)
        vision_tags = _subscribe(registry, sink, model="vision", events=["tag.changed"])
        ids = _record(
            registry,
            ("version.created", "vision"),
            ("tag.changed", "vision"),
            ("alias.moved", "text"),
            ("tag.changed", "text"),
        )
        assert _drain(_dispatcher(registry)) == 5
        assert sink.bad_signatures == []
        assert len(sink.received) == 5
        for got in sink.received:
            assert got.body["id"] == got.event_id
            assert got.body["type"] == got.kind
        assert sorted(r.event_id for r in sink.received) == sorted([*ids, ids[1]])
        assert {r.event_id: r.body["data"]["n"] for r in sink.received} == {
            event: n for n, event in enumerate(ids)
        }
        assert _drain(_dispatcher(registry)) == 0
    page = hooks.deliveries(registry.db, vision_tags.id)
    assert [(d.event_id, d.status, d.attempts, d.last_status) for d in page.deliveries] == [
        (ids[1], "delivered", 1, 200)
    ]
    assert len(hooks.deliveries(registry.db, everything.id).deliveries) == 4
    assert hooks.pending(registry.db) == 0
    assert [s.id for s in hooks.listing(registry.db, "text")] == [everything.id]


@ON_DATABASES
def test_failed_deliveries_retry_with_backoff_then_give_up(registry: Registry) -> None:
    answers = iter([500, 503, 200])
    with receiver() as sink:
        sink.answer = lambda _: next(answers)
        created = _subscribe(registry, sink)
        (event,) = _record(registry, ("version.deleted", "m"))
        dispatcher = _dispatcher(registry, webhook_backoff_s=0.01, webhook_max_attempts=5)
        sink.wait_for(lambda s: _drain(dispatcher) >= 0 and len(s.delivered()) == 1, 10)
        assert [r.answered for r in sink.received] == [500, 503, 200]
        assert {r.raw for r in sink.received} == {sink.received[0].raw}  # same bytes each time
        (delivery,) = hooks.deliveries(registry.db, created.id).deliveries
        assert (delivery.status, delivery.attempts, delivery.event_id) == ("delivered", 3, event)
        with registry.db.read() as conn:
            rows = conn.execute(
                select(attempts.c.attempt, attempts.c.status).order_by(attempts.c.attempt)
            ).all()
        assert [tuple(r) for r in rows] == [(1, 500), (2, 503), (3, 200)]

        sink.answer = lambda _: 500
        _record(registry, ("tag.changed", "m"))
        quitter = _dispatcher(registry, webhook_backoff_s=0.01, webhook_max_attempts=2)
        sink.wait_for(lambda s: _drain(quitter) >= 0 and hooks.pending(registry.db) == 0, 10)
    latest = hooks.deliveries(registry.db, created.id).deliveries[0]
    assert (latest.status, latest.attempts, latest.last_status) == ("failed", 2, 500)


@ON_DATABASES
def test_backoff_doubles_up_to_the_maximum(registry: Registry) -> None:
    dispatcher = _dispatcher(
        registry, webhook_backoff_s=2, webhook_backoff_max_s=10, webhook_max_attempts=6
    )
    assert [dispatcher.backoff(n) for n in range(1, 7)] == [2, 4, 8, 10, 10, None]


@ON_DATABASES
def test_unreachable_receiver_is_an_attempt(registry: Registry) -> None:
    created = _create(registry, "http://127.0.0.1:9/nothing", None, None)
    _record(registry, ("version.created", "m"))
    assert _drain(_dispatcher(registry, webhook_backoff_s=60)) == 1
    (delivery,) = hooks.deliveries(registry.db, created.id).deliveries
    assert (delivery.status, delivery.attempts, delivery.last_status) == ("pending", 1, None)
    assert delivery.last_error is not None
    assert "Connect" in delivery.last_error


@ON_DATABASES
def test_claims_are_exclusive_until_their_lease_ends(registry: Registry) -> None:
    _create(registry, "http://127.0.0.1:9/", None, None)
    _record(registry, *[("tag.changed", "m")] * 6)
    taken: list[list[int]] = []

    def take(owner: str) -> None:
        taken.append([c.delivery_id for c in claim(registry.db, owner, 4, 60)])

    threads = [threading.Thread(target=take, args=(f"d{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [d for batch in taken for d in batch]
    assert sorted(claimed) == sorted(set(claimed))
    assert len(claimed) == 6
    assert claim(registry.db, "late", 10, 60) == []
    # a dispatcher that died holding a lease: once it ends, the deliveries are claimed again
    expired = claim(registry.db, "gone", 10, 60)
    assert expired == []
    with registry.db.write() as conn:
        conn.execute(update(deliveries).values(claimed_until=now()))  # every lease is over
    again = claim(registry.db, "successor", 10, 60)
    assert sorted(c.delivery_id for c in again) == sorted(claimed)
    assert {c.attempt for c in again} == {2}


@ON_DATABASES
def test_subscriptions_check_input_and_delete(registry: Registry) -> None:
    bad = (
        "ftp://x/",
        "http:///nohost",
        "x" * 3000,
        "http://[::1",
        "http://a:b/",
        "http://a:99999/",
    )
    for url in bad:
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "invalid-webhook"):
            _create(registry, url, None, None)
    created = _create(registry, "http://127.0.0.1:9/", ["alias.moved"], "m")
    assert created.secret.startswith("whsec_")
    assert len(created.secret) > 40
    assert hooks.get(registry.db, created.id).events == ["alias.moved"]
    _record(registry, ("alias.moved", "m"))
    hooks.remove(registry.db, created.id)
    with pytest.raises(RegistryFailure, check=lambda e: e.code == "webhook-not-found"):
        hooks.remove(registry.db, created.id)
    # its delivery is cancelled rather than sent
    assert claim(registry.db, "d", 10, 60) == []
    assert hooks.pending(registry.db) == 0
    # both changes are audited under the model, the secret in neither
    rows = entries(registry.db, AuditQuery(model="m")).entries
    assert [(r.action, r.target, r.actor) for r in rows] == [
        ("webhook.delete", f"webhooks/{created.id}", "system"),
        ("webhook.create", f"webhooks/{created.id}", "system"),
    ]
    assert rows[0].before == rows[1].after
    assert rows[1].after is not None
    assert rows[1].after["url"] == "http://127.0.0.1:9/"
    assert created.secret not in str([r.model_dump() for r in rows])


@ON_DATABASES
def test_a_creator_who_loses_manage_or_their_token_hears_nothing_more(registry: Registry) -> None:
    access = registry.access
    alice = access.create_token(SYSTEM, "alice", "ci", False, None)
    bob = access.create_token(SYSTEM, "bob", "ci", False, None)
    for who in ("alice", "bob"):
        access.grant(SYSTEM, "vision", who, "manage")
    allowing = Destinations(registry.settings.model_copy(update=_LOOPBACK_OK))
    with receiver() as sink:
        made = {
            token.owner: hooks.create(
                registry.db,
                sink.url,
                None,
                "vision",
                Actor(token.owner, token.id),
                destinations=allowing,
            )
            for token in (alice, bob)
        }
        sink.secrets += [m.secret for m in made.values()]
        _record(registry, ("version.created", "vision"))
        assert _drain(_dispatcher(registry)) == 2
        assert len(sink.received) == 2
        # alice is demoted to read; bob's token is revoked (he keeps manage)
        access.grant(SYSTEM, "vision", "alice", "read")
        access.revoke_token(SYSTEM, bob.id)
        _record(registry, ("tag.changed", "vision"), ("version.deleted", "vision"))
        assert _drain(_dispatcher(registry)) == 4
        assert len(sink.received) == 2
        # later events make no delivery at all
        _record(registry, ("alias.moved", "vision"))
        assert hooks.pending(registry.db) == 0
    reasons = {owner: hooks.get(registry.db, m.id).paused_reason for owner, m in made.items()}
    assert reasons == {
        "alice": "alice no longer has manage on 'vision'",
        "bob": f"its creator's token {bob.id} was revoked",
    }
    assert all(s.paused_at is not None for s in hooks.listing(registry.db, "vision"))
    for owner, sub in made.items():
        statuses = [d.status for d in hooks.deliveries(registry.db, sub.id).deliveries]
        assert statuses == ["cancelled", "cancelled", "delivered"], owner
    paused = entries(registry.db, AuditQuery(model="vision", action="webhook.pause")).entries
    assert sorted((r.actor, r.target) for r in paused) == sorted(
        ("system", f"webhooks/{m.id}") for m in made.values()
    )
