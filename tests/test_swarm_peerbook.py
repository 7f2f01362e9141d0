"""The peer book's mute policy on its own: a proven identity that keeps sending rejected messages
is muted for a time that doubles at each mute (capped at an hour); an address or a relay route is
counted but never muted (anyone can send from an address, and a relay carries honest peers too)."""

import threading
import time
from collections import Counter

import pytest

from sapo_edge.swarm.peerbook import PeerBook

PEER = "ab" * 16  # a node id (32 hex digits)


def book(threshold: int = 3, base: float = 30.0) -> PeerBook:
    return PeerBook(
        threading.Condition(),
        Counter(),
        reject_threshold=threshold,
        reject_window=60.0,
        mute_base=base,
        max_tracked=100,
        log=lambda _m: None,
    )


def mute_once(b: PeerBook, key: str, threshold: int = 3) -> float:
    """Seconds `key` is muted for after `threshold` rejections in a row (0 when not muted)."""
    results = [b.reject(key, "bad_signature") for _ in range(threshold)]
    assert results[:-1] == [False] * (threshold - 1)  # below the threshold: counted only
    st = b.stats[key]
    return max(0.0, st.muted_until - time.time()) if results[-1] else 0.0


def test_each_mute_of_a_peer_lasts_twice_as_long_as_the_last_up_to_an_hour():
    b = book(base=30.0)
    got = [mute_once(b, PEER) for _ in range(9)]
    want = [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]  # 30 s x 2**k, at most 3600 s
    assert got == pytest.approx(want, abs=2.0)
    assert b.stats[PEER].mutes == 9 and b.counters["muted"] == 9
    assert b.rejections(PEER)["bad_signature"] == 27


@pytest.mark.parametrize("key", ["ip:10.0.0.7", "relay:ws://relay.example:8765", "ab" * 15])
def test_an_address_a_relay_route_or_a_non_id_is_counted_but_never_muted(key):
    b = book(threshold=3)
    assert [b.reject(key, "bad_frame") for _ in range(30)] == [False] * 30
    assert b.stats[key].muted_until == 0.0 and b.stats[key].mutes == 0
    assert b.counters["rejected:bad_frame"] == 30 and b.counters["muted"] == 0
    assert b.rejections(key)["bad_frame"] == 30


def test_rejections_older_than_the_window_do_not_count_towards_a_mute(monkeypatch):
    import sapo_edge.swarm.peerbook as peerbook

    clock = [1_000_000.0]
    monkeypatch.setattr(peerbook.time, "time", lambda: clock[0])
    b = book(threshold=3)
    for _ in range(2):
        assert not b.reject(PEER, "bad_signature")
    clock[0] += 61.0  # the window is 60 s: the first two have left it
    assert not b.reject(PEER, "bad_signature")
    assert not b.reject(PEER, "bad_signature")
    assert b.reject(PEER, "bad_signature")  # three inside one window
    assert b.stats[PEER].muted_until == clock[0] + 30.0
