"""Which paths carry a node now, read once from its network (NetworkTransport.paths): the peers
linked directly and how (the LAN, a manual address), whether the relay's (or NATS') route is up,
and whom it heard through that route lately. The status line (describe), a student's header
(classroom/join_status.py) and the host's (classroom/host.py) all format this one value.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .routes import is_relay

RECENT_S = 300.0  # heard through the relay this long ago at most


@dataclass(frozen=True)
class Paths:
    direct: dict[str, str]  # node id -> how it is linked ("lan", "manual")
    relay_up: bool  # the relay's or the NATS servers' route is up
    heard: frozenset[str]  # node ids heard through that route lately (none linked directly)

    def linked(self, how: str) -> int:
        """How many peers are linked directly that way ("lan", "manual")."""
        return sum(v == how for v in self.direct.values())


def of(net: Any, now: float | None = None) -> Paths:
    """The paths of `net` (a NetworkTransport) at this moment, every count from one lock."""
    recent = (time.time() if now is None else now) - RECENT_S
    with net.core.lock:
        links = net.table.links
        stats = net.book.stats
        direct = {s.node_id: s.via for k, s in stats.items() if k in links and s.node_id}
        relay_up = any(is_relay(k) for k in links) or bool(net.nats is not None and net.nats.up)
        heard = frozenset(
            s.node_id
            for s in stats.values()
            if s.node_id and s.via == "relay" and s.last_seen > recent and s.node_id not in direct
        )
    return Paths(direct, relay_up, heard)


def describe(net: Any) -> str:
    """e.g. '2 peers connected (1 lan, 1 manual); relay up, 3 more heard through it in 5 min'
    ('0 peers connected; relay up, 3 nodes heard in 5 min' when the relay carries all)."""
    p = of(net)
    n, vias = len(p.direct), Counter(p.direct.values())
    text = f"{n} peer{'s' if n != 1 else ''} connected"
    if vias:
        text += " (" + ", ".join(f"{c} {v}" for v, c in sorted(vias.items())) + ")"
    heard = len(p.heard)
    nodes = f"{heard} node{'s' if heard != 1 else ''} heard in 5 min"
    if p.direct:  # nodes linked directly are counted there, not again as heard via the relay
        nodes = f"{heard} more heard through it in 5 min"
    if net.nats is not None:
        text += f"; {net.nats.describe()}, {nodes}"
    elif net.relay_url:
        text += f"; relay {'up' if p.relay_up else 'down'}, {nodes}"
    return text + f"; listening on :{net.port}"
