"""Webhook destinations (SSRF): loopback, private, link-local and other non-global addresses are
refused at subscription and, on the address actually connected to, at delivery; the operator's
settings allow internal receivers; redirects are not followed and answers' bodies not recorded."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.registry import destinations as dest
from app.registry import webhooks as hooks
from app.registry.errors import RegistryFailure
from app.registry.outbox import record
from app.registry.store import Registry
from app.settings import Settings
from tests.registry.receiver import receiver

ON_SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
#: a globally routable address that nothing in these tests connects to
PUBLIC = "93.184.216.34"

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "::1": "loopback",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "169.254.169.254": "link-local",
    "fe80::1": "link-local",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",  # ipaddress calls it global
    "10.0.0.5": "private",
    "172.16.3.4": "private",
    "192.168.1.1": "private",
    "fd00::1": "private",
    "100.64.0.1": "non-global",  # carrier-grade NAT
    "::ffff:127.0.0.1": "loopback",
    "::ffff:169.254.169.254": "link-local",
    "64:ff9b::7f00:1": "loopback",  # NAT64 of 127.0.0.1, which ipaddress calls global
    "2002:a00:1::1": "private",  # 6to4 of 10.0.0.1, likewise
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "192.0.2.1": "non-global",  # documentation
    "198.18.0.1": "non-global",  # benchmarking
}


def test_non_global_addresses_are_refused_by_default() -> None:
    policy = dest.Destinations(Settings())
    for text, kind in REFUSED.items():
        assert (text, policy.refusal(ipaddress.ip_address(text))) == (text, kind)
    for text in (PUBLIC, "8.8.8.8", "2606:4700::1111"):
        assert policy.refusal(ipaddress.ip_address(text)) is None


def test_operators_allow_private_receivers_or_listed_networks() -> None:
    private = dest.Destinations(Settings(webhook_allow_private=True))
    # link-local (cloud metadata), multicast, reserved and the like stay refused
    allowed = {text for text, kind in REFUSED.items() if kind in ("loopback", "private")}
    assert {"127.0.0.1", "::1", "10.0.0.5", "fd00::1", "::ffff:127.0.0.1"} <= allowed
    for text in REFUSED:
        why = private.refusal(ipaddress.ip_address(text))
        assert (text, why is None) == (text, text in allowed)
    listed = dest.Destinations(Settings(webhook_allowed_networks="10.1.0.0/16,169.254.169.254/32"))
    for text, permitted in {"10.1.2.3": True, "10.2.0.1": False, "169.254.169.254": True}.items():
        assert (text, listed.refusal(ipaddress.ip_address(text)) is None) == (text, permitted)


@ON_SQLITE
def test_subscriptions_to_refused_hosts_are_refused(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = {"metadata.test": ["169.254.169.254"], "mixed.test": ["10.0.0.1", PUBLIC]}
    _resolve(monkeypatch, names)
    default = dest.Destinations(registry.settings)
    for url in (
        "http://127.0.0.1:9/",
        "http://[::1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/",  # 127.0.0.1 spelled as one number
        "http://0x7f.1/",
        "https://localhost:8443/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.5/",
        "http://metadata.test/",
    ):
        with pytest.raises(
            RegistryFailure, check=lambda e: e.code == "webhook-destination-refused"
        ):
            hooks.create(registry.db, url, None, None, destinations=default)
    assert hooks.listing(registry.db) == []
    hooks.create(registry.db, "https://mixed.test/", None, None, destinations=default)
    # a name that does not resolve yet is left to delivery's check
    hooks.create(registry.db, "https://later.invalid/", None, None, destinations=default)
    private = dest.Destinations(
        registry.settings.model_copy(update={"webhook_allow_private": True})
    )
    hooks.create(registry.db, "http://127.0.0.1:9/", None, None, destinations=private)
    with pytest.raises(RegistryFailure, check=lambda e: e.code == "webhook-destination-refused"):
        hooks.create(registry.db, "http://metadata.test/", None, None, destinations=private)


@ON_SQLITE
def test_a_name_rebound_to_loopback_after_subscribing_gets_no_request(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    with receiver() as sink:
        port = httpx.URL(sink.url).port
        names = {"rebind.test": [PUBLIC]}
        _resolve(monkeypatch, names)
        url = f"http://rebind.test:{port}/"
        created = hooks.create(
            registry.db, url, None, None, destinations=dest.Destinations(registry.settings)
        )
        sink.secrets.append(created.secret)
        names["rebind.test"] = ["127.0.0.1"]
        _event(registry)
        assert _drain(registry, httpx.AsyncClient(timeout=5)) == 1
        assert sink.arrivals == 0
    (delivery,) = hooks.deliveries(registry.db, created.id).deliveries
    assert (delivery.status, delivery.attempts, delivery.last_status) == ("failed", 1, None)
    assert delivery.last_error is not None
    assert delivery.last_error.startswith("refused: webhooks may not post to rebind.test")
    assert "127.0.0.1 (loopback)" in delivery.last_error


@ON_SQLITE
def test_delivery_connects_to_the_checked_address(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the name resolves only through the registry's own lookup: arriving proves it connected to
    # the address it checked rather than resolving again
    _resolve(monkeypatch, {"receiver.test": ["127.0.0.1"]})
    private = {"webhook_allow_private": True}
    with receiver() as sink:
        url = f"http://receiver.test:{httpx.URL(sink.url).port}/"
        settings = registry.settings.model_copy(update=private)
        created = hooks.create(
            registry.db, url, None, None, destinations=dest.Destinations(settings)
        )
        sink.secrets.append(created.secret)
        _event(registry)
        assert _drain(registry, httpx.AsyncClient(timeout=5), **private) == 1
        assert sink.bad_signatures == []
        assert len(sink.received) == 1
    (delivery,) = hooks.deliveries(registry.db, created.id).deliveries
    assert (delivery.status, delivery.last_status) == ("delivered", 200)


@ON_SQLITE
def test_redirects_are_not_followed_and_answers_not_recorded(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _resolve(monkeypatch, {"hooks.example": [PUBLIC]})
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(302, headers={"Location": "http://169.254.169.254/"})
        return httpx.Response(500, text="internal admin page: password=hunter2")

    policy = dest.Destinations(registry.settings)
    created = hooks.create(
        registry.db, "https://hooks.example:8443/in", None, None, destinations=policy
    )
    _event(registry)
    _event(registry)
    # even a client that would follow redirects does not, for a delivery
    client = httpx.AsyncClient(transport=httpx.MockTransport(answer), follow_redirects=True)
    assert _drain(registry, client) == 2
    assert len(seen) == 2
    for request in seen:
        assert (request.url.host, request.url.port) == (PUBLIC, 8443)
        assert request.headers["Host"] == "hooks.example:8443"
        assert request.extensions["sni_hostname"] == "hooks.example"
    found = hooks.deliveries(registry.db, created.id).deliveries
    assert sorted((d.last_status, d.last_error) for d in found) == [(302, None), (500, None)]


def _resolve(monkeypatch: pytest.MonkeyPatch, names: dict[str, list[str]]) -> None:
    """Resolve `names` from the table (read at each lookup), literal addresses as themselves."""
    real: Callable[[str, int], list[dest.Address]] = dest.lookup

    def lookup(host: str, port: int) -> list[dest.Address]:
        if host in names:
            return [ipaddress.ip_address(a) for a in names[host]]
        if host.endswith((".test", ".invalid", ".example")):
            raise OSError(f"{host} does not resolve")
        return real(host, port)

    monkeypatch.setattr(dest, "lookup", lookup)


def _event(registry: Registry) -> None:
    with registry.db.write() as conn:
        record(conn, "version.created", "m", {})


def _drain(registry: Registry, client: httpx.AsyncClient, **settings: Any) -> int:
    dispatcher = hooks.Dispatcher(registry.db, registry.settings.model_copy(update=settings))

    async def go() -> int:
        async with client:
            return await dispatcher.drain_once(client)

    return asyncio.run(go())
