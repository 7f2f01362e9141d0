"""A laptop that wakes up is back in the mesh within seconds: its dialers were in the middle of a
backoff counted in a monotonic clock that stood still while it slept, and its links are dead on
the other side. GapWatch notices the gap (fake clocks here); the links layer re-dials at once."""

from __future__ import annotations

import socket
import time

from sapo_edge.swarm.resume import GapWatch


class Clocks:
    def __init__(self) -> None:
        self.w, self.m = 1_000_000.0, 50.0

    def wall(self) -> float:
        return self.w

    def mono(self) -> float:
        return self.m


def test_the_watch_sees_a_sleep_a_stop_and_ignores_a_clock_stepped_back() -> None:
    c = Clocks()
    watch = GapWatch(tick=1.0, wall=c.wall, mono=c.mono)
    c.w, c.m = c.w + 1.0, c.m + 1.0
    assert watch.gap() == 0.0  # an ordinary tick
    c.w += 120.0  # suspended: the wall clock ran, the monotonic one did not
    assert watch.gap() == 119.0
    c.w, c.m = c.w + 30.0, c.m + 30.0  # SIGSTOPped: both ran
    assert watch.gap() == 29.0
    c.w, c.m = c.w - 500.0, c.m + 1.0  # NTP stepped the wall clock back: no time lost
    assert watch.gap() == 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jump_wall_clock(node, seconds: float) -> None:
    """What the node's watch sees after a suspend of `seconds`: wall time moved, monotonic not."""
    node.dialer.watch.wall = lambda: time.time() + seconds


def test_a_woken_laptop_redials_at_once_instead_of_finishing_its_backoff(nodes) -> None:
    port = _free_port()
    # the peer was away (nothing listens yet): the dialer fails and backs off 15-30 s
    a = nodes(peers=[f"127.0.0.1:{port}"], reconnect_base=30.0, reconnect_max=60.0)
    assert a.wait_for(lambda: a.counters["dial_failed"] >= 1, 10)
    b = nodes(listen=f"127.0.0.1:{port}")  # the peer is there now
    _jump_wall_clock(a, 120.0)  # a was asleep for two minutes
    assert a.wait_for(lambda: a.counters["resumed"] >= 1, 10)
    assert a.wait_for(lambda: b.ident.node_id in a.connected(), 10), a.describe()
    assert b.wait_for(lambda: a.ident.node_id in b.connected(), 10)


def test_links_older_than_the_peers_patience_are_redialed_on_waking(nodes) -> None:
    b = nodes()
    a = nodes(peers=[f"127.0.0.1:{b.port}"])
    assert a.wait_for(lambda: b.ident.node_id in a.connected(), 10)
    before = a.table.links[b.ident.node_id]
    # asleep for 60 s, far past 1.5 heartbeats: b has dropped this link (no pong); it is dead
    _jump_wall_clock(a, 60.0)
    assert a.wait_for(lambda: a.counters["resumed"] >= 1, 10)
    assert a.wait_for(lambda: a.table.links.get(b.ident.node_id) not in (None, before), 10), (
        "no new link after waking"
    )
    assert b.wait_for(lambda: a.ident.node_id in b.connected(), 10)
    assert not a.rejections() and not b.rejections()
