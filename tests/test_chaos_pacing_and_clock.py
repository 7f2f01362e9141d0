"""A node that publishes too fast paces itself under its peers' limit; clock skew: a peer whose
clock is a few minutes off still exchanges; one further off than the freshness window is refused
with a sentence naming the clock, counted, and never muted (its link stays up and its batches
flow again once its clock is right)."""

from __future__ import annotations

import time

from swarm_util import batch_for

import sapo_edge.swarm.network as network
import sapo_edge.swarm.publish_pace as publish_pace
from sapo_edge.swarm.batches import make_rollouts


def _skewed(monkeypatch, offset: float) -> None:
    """Every batch published from now on is stamped `offset` seconds off the real clock."""

    def stamped(*a, **kw):
        return make_rollouts(*a, **kw, sent_at=time.time() + offset)

    monkeypatch.setattr(network, "make_rollouts", stamped)


def test_a_peer_minutes_off_still_exchanges_and_one_far_off_is_told_not_muted(
    nodes, monkeypatch
) -> None:
    said: list[str] = []
    a = nodes(reject_threshold=5, log=said.append, max_batches_per_minute=600)
    b = nodes(peers=[f"127.0.0.1:{a.port}"], max_batches_per_minute=600)  # 14 in a second
    assert a.wait_for(lambda: len(a.connected()) == 1, 5)
    assert b.wait_for(lambda: len(b.connected()) == 1, 5)  # each wakes on its own changes
    _skewed(monkeypatch, -240.0)  # 4 minutes slow: inside the 300 s window
    b.publish(batch_for(b.ident, 1))
    assert a.wait_for(lambda: a.counters["delivered"] == 1, 5)

    _skewed(monkeypatch, +600.0)  # 10 minutes fast: refused, and more than the mute threshold
    for r in range(2, 14):
        b.publish(batch_for(b.ident, r))
    assert a.wait_for(lambda: a.counters["rejected:expired"] == 12, 5), a.counters
    assert a.counters["muted"] == 0 and b.ident.node_id in a.connected()
    row = {p.node_id: p for p in a.peers()}[b.ident.node_id]
    assert row.rejections == {"expired": 12} and not row.muted
    clock = [m for m in said if "clock" in m]
    assert len(clock) == 1, said  # told once, not once per batch
    assert "600 s ahead of this laptop's clock" in clock[0] and "date and time" in clock[0]

    monkeypatch.undo()  # the clock is fixed: the same link carries batches again
    b.publish(batch_for(b.ident, 14))
    assert a.wait_for(lambda: a.counters["delivered"] == 2, 5), a.counters


def test_a_node_publishing_too_fast_paces_itself_instead_of_being_refused(nodes) -> None:
    said: list[str] = []
    a = nodes(max_batches_per_minute=10)
    b = nodes(peers=[f"127.0.0.1:{a.port}"], max_batches_per_minute=10, log=said.append)
    assert a.wait_for(lambda: len(a.connected()) == 1, 5)
    assert b.wait_for(lambda: len(b.connected()) == 1, 5)  # each wakes on its own changes
    for r in range(1, 16):  # a tiny model's rounds can be this fast
        b.publish(batch_for(b.ident, r))
    # a minute's 10 spread out: at most ceil(10 / 6) = 2 in any 10 s, and those 5 s apart
    assert a.wait_for(lambda: a.counters["delivered"] == 1, 5), a.counters
    assert b.counters["publish_paced"] == 14 and b.counters["published"] == 1
    assert not [k for k in a.counters if k.startswith("rejected:")] and a.counters["muted"] == 0
    assert len([m for m in said if "batches a minute" in m]) == 1


def test_pacing_never_exceeds_the_minute_and_spreads_it_over_the_minute(nodes, monkeypatch) -> None:
    """On a made-up clock, a node trying to publish every 0.1 s for 5 minutes: no 60 s window
    holds more than the peers' limit, no 10 s window more than a sixth of it (rounded up), and
    at 60 a minute it is never silent for a whole 10 s (spread, not spent in one burst)."""
    for per_minute in (60, 10, 7, 1):
        node = nodes(max_batches_per_minute=per_minute)
        clock = [1000.0]
        monkeypatch.setattr(publish_pace.time, "monotonic", lambda clock=clock: clock[0])
        sent: list[float] = []
        for _ in range(3000):
            if node.pace.take():
                sent.append(clock[0])
            clock[0] += 0.1
        monkeypatch.undo()
        cap10 = -(-per_minute // 6)
        for i, t in enumerate(sent):  # every window that starts at a send
            assert sum(1 for u in sent[i:] if u < t + 60.0) <= per_minute, per_minute
            assert sum(1 for u in sent[i:] if u < t + 10.0) <= cap10, per_minute
        gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
        assert len(sent) >= 5 * per_minute - cap10, (per_minute, len(sent))
        if per_minute % 6 == 0:  # the default 60: never a whole 10 s without a batch going out
            assert max(gaps) <= 10.0 + 1e-6, (per_minute, max(gaps))
        # and over the 10 s, not its share in the first second (which a peer linking in the
        # other nine never heard): at 60 a minute, at most 5 at once, then one a second
        if per_minute == 60:
            for i, t in enumerate(sent):
                assert sum(1 for u in sent[i:] if u < t + 1.0) <= 5, sent[i : i + 6]
            assert max(gaps) <= 5.0 + 0.1 + 1e-6, max(gaps)  # never 9 s silent
