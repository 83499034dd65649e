"""Where webhooks may post: by default only to globally routable addresses, so that whoever may
subscribe cannot make the registry POST to its own network (cloud metadata, loopback admin ports,
private services).

The check runs at delivery on the addresses actually connected to: the name is resolved once,
the permitted address is put in the URL, and the original name stays in ``Host`` and in TLS SNI
(so certificates are still verified against it). A name that resolves elsewhere between a check
and a connect (DNS rebinding) therefore cannot pass. Creating a subscription checks it too, to
refuse early what delivery would refuse anyway.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import httpx

from app.registry.errors import RegistryFailure
from app.settings import Settings

Address = IPv4Address | IPv6Address
_NAT64 = IPv6Network("64:ff9b::/96")
#: what "private" means here (RFC 1918, unique-local): ipaddress's is_private also takes in
#: documentation, benchmarking, reserved and broadcast ranges, which no receiver lives in
_PRIVATE = [
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
]


@dataclass(frozen=True)
class Pinned:
    """A delivery's target: the URL with the checked address as host, and the name it had."""

    url: httpx.URL
    host_header: str
    server_name: str


def lookup(host: str, port: int) -> list[Address]:
    """The addresses `host` resolves to, in the resolver's order (a literal address: itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _target(url: str) -> tuple[httpx.URL, str, int]:
    """The parsed URL, its host as the resolver and TLS want it (IDNA), and its port."""
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    host = parsed.raw_host.decode("ascii")
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(0 < len(label) <= 63 for label in labels):
        # the resolver raises UnicodeError on an empty or over-long label (an IP literal has
        # neither): refused here as a bad URL, before any lookup
        raise RegistryFailure("invalid-webhook", f"{host[:80]!r} is not a valid host name")
    return parsed, host, port


def _embedded(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4): where packets really go."""
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def _within(address: Address, networks: list[IPv4Network | IPv6Network]) -> bool:
    """Whether `address`, or the IPv4 address it carries, is in one of `networks`."""
    both = {address, _embedded(address)}
    return any(a in n for n in networks for a in both if a.version == n.version)


def kind_of(address: Address) -> str | None:
    """Why `address` is not a public destination (loopback, private, ...); None when it is."""
    inner = _embedded(address)
    for name in ("unspecified", "loopback", "link_local", "multicast", "reserved"):
        if getattr(address, f"is_{name}") or getattr(inner, f"is_{name}"):
            return name.replace("_", "-")
    if _within(address, _PRIVATE):
        return "private"
    if not (address.is_global and inner.is_global):
        return "non-global"
    return None


class Destinations:
    """The operator's policy on webhook destinations, from the settings."""

    def __init__(self, settings: Settings) -> None:
        self.allow_private = settings.webhook_allow_private
        self.networks: list[IPv4Network | IPv6Network] = [
            ipaddress.ip_network(n, strict=False) for n in settings.webhook_allowed_networks
        ]

    def refusal(self, address: Address) -> str | None:
        """Why a webhook may not connect to `address`; None when it may."""
        if _within(address, self.networks):
            return None
        kind = kind_of(address)
        # loopback and private receivers are an operator's choice; link-local (cloud metadata),
        # multicast and unspecified addresses need to be listed one by one
        if kind in ("loopback", "private") and self.allow_private:
            return None
        return kind

    def check(self, url: str) -> None:
        """Refuse, at subscription, a URL whose host resolves only to refused addresses (a name
        that does not resolve yet passes: delivery checks again)."""
        _, host, port = _target(url)
        try:
            found = lookup(host, port)
        except OSError:
            return
        self._pick(host, found)

    async def pin(self, url: str) -> Pinned:
        """Resolve the URL's host once and aim at a permitted address; webhook-destination-refused
        when there is none, OSError when the name does not resolve."""
        parsed, host, port = _target(url)
        found = await asyncio.to_thread(lookup, host, port)
        chosen = self._pick(host, found)
        return Pinned(
            url=parsed.copy_with(host=str(chosen)),
            host_header=parsed.netloc.decode("ascii"),
            server_name=host,
        )

    def _pick(self, host: str, found: list[Address]) -> Address:
        refused = {a: self.refusal(a) for a in found}
        for address, why in refused.items():
            if why is None:
                return address
        listed = ", ".join(f"{a} ({why})" for a, why in refused.items()) or "no address"
        raise RegistryFailure(
            "webhook-destination-refused",
            f"webhooks may not post to {host}: {listed}; an operator may allow such receivers "
            "with PT2SERDE_WEBHOOK_ALLOW_PRIVATE or PT2SERDE_WEBHOOK_ALLOWED_NETWORKS",
        )
