"""A node's NetworkTransport from its settings, built in one place for `run`, `join` and `host`:
the room, listen address, peers, relay, inbound cap and mDNS come from the Config; a class
replaces what it decides (its room's secret, the host's address, its relay, the host's
admission endpoint) by keyword."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config.settings import Config
from ..swarm.identity import Identity
from ..swarm.network import NetworkTransport


def network_for(
    cfg: Config,
    ident: Identity,
    *,
    name: str,
    log: Callable[[str], None],
    kind: type[NetworkTransport] = NetworkTransport,
    **over: Any,
) -> NetworkTransport:
    """Not started. `over` replaces any NetworkTransport keyword the settings give; the room's
    secret is read (--secret, --secret-file, SAPO_EDGE_SECRET) only when none is given."""
    options: dict[str, Any] = {
        "room": cfg.room,
        "listen": cfg.listen,
        "peers": cfg.peer,
        "relay": cfg.relay,
        "max_inbound_groups": cfg.max_inbound_groups,
        "mdns": cfg.mdns,
        "name": name,
        "log": log,
        **over,
    }
    if "secret" not in options:
        from ..swarm.roomkey import read_secret

        options["secret"] = read_secret(cfg.secret, cfg.secret_file)
    return kind(ident, **options)
