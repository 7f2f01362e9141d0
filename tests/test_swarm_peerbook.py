"""The peer book's mute policy on its own: a proven identity that keeps sending rejected messages
is muted for a time that doubles at each mute (capped at an hour); an address or a relay route is
counted but never muted (anyone can send from an address, and a relay carries honest peers too)."""

import threading
import time
from collections import Counter

import pytest

from sapo_edge.data.textsafe import clean
from sapo_edge.swarm.identity import name_for_id
from sapo_edge.swarm.peerbook import PeerBook, is_node_id, peer_name
from sapo_edge.swarm.protocol import Auth

PEER = "ab" * 16  # a node id (32 hex digits)


def book(threshold: int = 3, base: float = 30.0, log=lambda _m: None, **kw) -> PeerBook:
    return PeerBook(
        threading.Condition(),
        Counter(),
        reject_threshold=threshold,
        reject_window=60.0,
        mute_base=base,
        max_tracked=100,
        log=log,
        **kw,
    )


def mute_once(b: PeerBook, key: str, threshold: int = 3) -> float:
    """Seconds `key` is muted for after `threshold` rejections in a row (0 when not muted)."""
    results = [b.reject(key, "bad_signature") for _ in range(threshold)]
    assert results[:-1] == [False] * (threshold - 1)  # below the threshold: counted only
    st = b.stats[key]
    return st.muted_until - time.time() if results[-1] else 0.0


def test_each_mute_of_a_peer_lasts_twice_as_long_as_the_last_up_to_an_hour(monkeypatch):
    import sapo_edge.swarm.peerbook as peerbook

    monkeypatch.setattr(peerbook.time, "time", lambda: 1_000_000.0)
    said: list[str] = []
    b = book(base=30.0, log=said.append)
    b.stat(PEER, auth("Ada"), "lan", node_id=PEER)
    got = [mute_once(b, PEER) for _ in range(9)]
    assert got == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]  # 30 s x 2**k, at most 1 h
    assert b.stats[PEER].mutes == 9 and b.counters["muted"] == 9
    assert b.rejections(PEER)["bad_signature"] == 27 and b.stats[PEER].rejected == 27
    assert said[:2] == [
        "peer Ada muted for 30 s (bad_signature)",
        "peer Ada muted for 60 s (bad_signature)",
    ]


@pytest.mark.parametrize("key", ["ip:10.0.0.7", "relay:ws://relay.example:8765", "ab" * 15])
def test_an_address_a_relay_route_or_a_non_id_is_counted_but_never_muted(key):
    b = book(threshold=3)
    assert [b.reject(key, "bad_frame") for _ in range(30)] == [False] * 30
    assert b.stats[key].muted_until == 0.0 and b.stats[key].mutes == 0
    assert b.stats[key].via == "" and b.stat(key, None, "relay").via == "relay"
    assert b.counters["rejected:bad_frame"] == 30 and b.counters["muted"] == 0
    assert b.rejections(key)["bad_frame"] == 30


def test_rejections_older_than_the_window_do_not_count_towards_a_mute(monkeypatch):
    import sapo_edge.swarm.peerbook as peerbook

    clock = [1_000_000.0]
    monkeypatch.setattr(peerbook.time, "time", lambda: clock[0])
    b = book(threshold=3)
    for _ in range(2):
        assert not b.reject(PEER, "bad_signature")
    clock[0] += 60.0  # exactly one window later: the first two still count...
    assert b.reject(PEER, "bad_signature")
    clock[0] += 60.001  # ...past it, they do not
    assert not b.reject(PEER, "bad_signature")
    assert not b.reject(PEER, "bad_signature")
    assert b.reject(PEER, "bad_signature")  # three inside one window
    assert b.stats[PEER].muted_until == clock[0] + 60.0  # the second mute


# --- the records themselves --------------------------------------------------------------------

OTHER = "cd" * 16


def auth(name: str, model: str = "m", backend: str = "cpu") -> Auth:
    return Auth(b"", name, model, backend, ("rollouts/2",))


def test_a_full_book_forgets_the_longest_silent_stranger_never_a_connected_peer():
    b = book()
    b.max_tracked = 3
    for key, seen, connected in (
        ("f" * 32, 10.0, False),
        ("b" * 32, 5.0, True),
        (PEER, 20.0, False),
    ):
        st = b.stat(key, None, "lan")
        st.last_seen, st.connected = seen, connected
    b.stat(OTHER, None, "lan")  # the fourth: the idle one heard last longest ago goes
    assert sorted(b.stats) == sorted(["b" * 32, PEER, OTHER])  # f..f, not the smallest key
    b.stats[PEER].connected = b.stats[OTHER].connected = True
    b.stat("e" * 32, None, "lan")  # nobody idle to forget: the book grows past its cap
    assert len(b.stats) == 4


def test_an_authenticated_peer_is_shown_by_its_cleaned_announced_name():
    b = book()
    st = b.stat(PEER, auth("Ada\x1b[2J", "Qwen\x07", "mlx\n"), "relay", node_id=PEER)
    assert (st.name, st.model, st.backend, st.via, st.node_id) == (
        "Ada[2J",
        "Qwen",
        "mlx ",
        "relay",
        PEER,
    )
    unnamed = b.stat(OTHER, None, "lan")
    assert unnamed.node_id == OTHER and unnamed.name == name_for_id(OTHER) and unnamed.via == "lan"
    st = b.stat(PEER, auth("", "q" * 300, "c" * 100), "lan")  # no node_id given: kept
    assert st.node_id == PEER and st.name == name_for_id(PEER)
    assert len(st.model) == 200 and len(st.backend) == 40
    assert not is_node_id("X" * 32) and not is_node_id("AB" * 16) and is_node_id("0f" * 16)
    assert b.stat("ip:10.0.0.1", None, "lan").node_id == ""  # an address is no identity


def test_a_peer_may_not_pass_as_someone_elses_derived_name():
    assert peer_name("", PEER) == name_for_id(PEER)
    assert peer_name(name_for_id(OTHER), PEER) == name_for_id(PEER)  # another id's shape
    assert peer_name(name_for_id(PEER), PEER) == name_for_id(PEER)  # its own: fine
    assert peer_name("  Ada  ", PEER) == "Ada"
    assert peer_name("x" * 100, PEER) == clean("x" * 100, 40)
    assert peer_name("", "") == ""


def test_the_peers_table_tells_apart_two_peers_showing_one_name_and_shows_mutes():
    b = book(threshold=1, own_name="me")
    b.stat(PEER, auth("twin"), "lan", node_id=PEER)
    b.stat(OTHER, auth("twin"), "relay", node_id=OTHER)
    b.stat("e" * 32, auth("me"), "lan", node_id="e" * 32)
    st = b.stat("f" * 32, auth("solo"), "lan", node_id="f" * 32)
    st.last_seen, st.received, st.accepted, st.connected = 123.0, 5, 3, True
    b.stat("ip:10.0.0.1", None, "lan")  # no id: not a row
    assert b.reject(PEER, "bad_signature")
    rows = {p.node_id: p for p in b.peers()}
    assert sorted(rows) == sorted([PEER, OTHER, "e" * 32, "f" * 32])
    assert rows[PEER].name == f"twin#{PEER[:6]}" and rows[OTHER].name == f"twin#{OTHER[:6]}"
    assert rows["e" * 32].name == "me#eeeeee" and rows["f" * 32].name == "solo"
    assert rows[PEER].muted and not rows[OTHER].muted
    assert rows[PEER].rejections == {"bad_signature": 1} and rows[PEER].rejected == 1
    assert (rows[OTHER].connection, rows[OTHER].model, rows[OTHER].backend) == ("relay", "m", "cpu")
    solo, twin = rows["f" * 32], rows[OTHER]
    assert (solo.last_seen, solo.received, solo.accepted, solo.connected) == (123.0, 5, 3, True)
    assert (twin.last_seen, twin.received, twin.accepted, twin.connected) == (None, 0, 0, False)
    assert [p.name for p in book().peers()] == []
    fresh = book()  # no own name: a peer may call itself anything
    fresh.stat(PEER, auth("XXXX"), "lan", node_id=PEER)
    assert [p.name for p in fresh.peers()] == ["XXXX"]


def test_rejections_by_key_and_in_total():
    b = book(threshold=100)
    b.reject(PEER, "bad_signature")
    b.reject(PEER, "replay")
    b.reject("ip:10.0.0.1", "replay")
    assert b.rejections(PEER) == Counter({"bad_signature": 1, "replay": 1})
    assert b.rejections("relay:nowhere") == Counter()
    assert b.rejections() == Counter({"bad_signature": 1, "replay": 2})


def test_a_peers_batches_per_minute_are_counted_over_a_sliding_minute():
    b = book()
    st = b.stat(PEER, None, "lan")
    assert [b.rate_ok(st, 100.0 + i, 3) for i in range(4)] == [True, True, True, False]
    assert not b.rate_ok(st, 160.0, 3)  # the first three are still inside the minute
    assert b.rate_ok(st, 160.5, 3)  # the first (t=100) has left it
    assert len(st.batches) == 3


def test_reject_says_muted_only_when_it_mutes():
    b = book(threshold=2)
    node = "ab" * 16
    assert is_node_id(node)
    for _ in range(5):  # an honest peer's wrong clock: counted, never a mute
        assert b.reject(node, "stale_round", mute=False) is False
    for _ in range(5):  # an address or a relay route: counted, never muted
        assert b.reject("ip:10.0.0.9", "bad_json") is False
        assert b.reject("relay:ws://r:7745", "bad_json") is False
    assert b.reject(node, "bad_json") is False  # one under the threshold
    assert b.reject(node, "bad_json") is True  # at it: muted now
