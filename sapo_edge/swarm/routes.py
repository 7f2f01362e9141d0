"""The keys links and routes go by, written and read here only: a peer's node id (32 hex) for a
direct link to it; 'relay:URL' for a relay or NATS route, through which any member of the room
may have signed what arrives (its rate and rejections are charged to the route); 'ip:ADDR' for
the address a link came from, charged for frames that fail authentication before anyone is
proven."""

from __future__ import annotations

_RELAY, _IP = "relay:", "ip:"


def relay_route(url: str) -> str:
    """The key of the route through the relay or NATS servers at `url`."""
    return _RELAY + url


def is_relay(key: str) -> bool:
    """Whether `key` is a relay or NATS route (not one proven peer)."""
    return key.startswith(_RELAY)


def ip_route(host: str) -> str:
    """The key that charges an address for what fails before a peer is proven."""
    return _IP + host
