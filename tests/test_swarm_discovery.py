"""LAN discovery over real multicast DNS on the loopback interface: nodes of a room register,
browse, resolve and connect to each other (via "lan"); other rooms are ignored; a node that
leaves is forgotten. TXT records from the network are parsed defensively."""

from __future__ import annotations

import uuid

import pytest
from swarm_util import batch_for, net

from sapo_edge.swarm.discovery import Advert, make_txt, parse_txt


def _txt(**over) -> dict[bytes, bytes | None]:
    d = {k.encode(): v.encode() for k, v in make_txt("ab" * 16, "0f" * 16, 7744, "m").items()}
    d.update({k.encode(): v for k, v in over.items()})
    return d


def test_txt_records_are_parsed_defensively() -> None:
    assert parse_txt(_txt()) == Advert("ab" * 16, "0f" * 16, 7744, "m")
    assert parse_txt(_txt(v=b"1")) == "unknown_version"
    assert parse_txt(_txt(v=None)) == "unknown_version"
    assert parse_txt(_txt(room=b"zz" * 8)) == "bad_room"
    assert parse_txt(_txt(id=b"\xff" * 32)) == "bad_id"
    assert parse_txt(_txt(port=b"70000")) == "bad_port"
    assert parse_txt(_txt(port=b"-1")) == "bad_port"
    assert parse_txt({}) == "unknown_version"


@pytest.fixture
def lan():
    made = []

    room = f"test-{uuid.uuid4().hex[:8]}"  # other test runs on this machine stay out

    def make(**kw):
        n = net(mdns=True, mdns_interfaces=["127.0.0.1"], **{"room": room, **kw})
        made.append(n)
        return n

    yield made, make
    for n in made:
        n.close()


def test_nodes_find_each_other_on_loopback_and_forget_one_that_leaves(lan) -> None:
    made, make = lan
    a, b = make(), make()
    outsider = make(room="another-room")
    for n, other in ((a, b), (b, a)):
        assert n.wait_for(lambda n=n, o=other: o.ident.node_id in n.connected(), 10), n.describe()
    for n, other in ((a, b), (b, a)):  # both resolved the other (whoever dialed first)
        assert n.wait_for(lambda n=n, o=other: o.ident.node_id in n.lan_peers(), 10)
        assert {p.connection for p in n.peers() if p.connected} == {"lan"}
    # at once, while both may still be settling on one of two links (both dialed): the batch
    # goes on whichever link is kept (test_swarm_double_dial.py counts this in earnest)
    a.publish(batch_for(a.ident, 1))
    assert b.wait_for(lambda: b.counters["delivered"] == 1, 5)
    assert outsider.connected() == [] and outsider.receive() == []
    assert a.wait_for(lambda: a.dialer.discovery.ignored.get("other_room", 0) >= 1, 10)

    made.remove(b)
    b.close()  # says goodbye on mDNS and on the websocket
    assert a.wait_for(lambda: b.ident.node_id not in a.connected(), 5)
    assert a.wait_for(lambda: b.ident.node_id not in a.lan_peers(), 5)
    assert f"lan:{b.ident.node_id}" not in a.dialer.dials  # no more redialing a node that left
