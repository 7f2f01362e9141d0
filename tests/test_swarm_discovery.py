"""LAN discovery over real multicast DNS on the loopback interface: nodes of a room register,
browse, resolve and connect to each other (via "lan"); other rooms are ignored; a node that
leaves is forgotten. TXT records from the network are parsed defensively."""

from __future__ import annotations

import time
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


def settle(a, b, dial_s: float = 2 * 2.0 + 0.5, tries: int = 4) -> None:
    """Wait until a and b hold one connection between them for longer than a dial already under
    way can take (connect + handshake: 2 x FAST's handshake_timeout). Both may dial at once;
    the link they then drop takes any batch sent on it in that moment with it (a known race,
    noted in docs/reliability.md), so a test that counts deliveries publishes after this."""
    ida, idb = a.ident.node_id, b.ident.node_id

    def same() -> bool:
        la, lb = a._links.get(idb), b._links.get(ida)
        return la is not None and lb is not None and la.dialer == lb.dialer

    for _ in range(tries):
        assert a.wait_for(same, 10) and b.wait_for(same, 10)
        held = (a._links.get(idb), b._links.get(ida))
        time.sleep(dial_s)
        if same() and (a._links.get(idb), b._links.get(ida)) == held:
            return
    raise AssertionError("a and b kept replacing their link")


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
    settle(a, b)
    a.publish(batch_for(a.ident, 1))
    assert b.wait_for(lambda: b.counters["delivered"] == 1, 5)
    assert outsider.connected() == [] and outsider.receive() == []
    assert a.wait_for(lambda: a._discovery.ignored.get("other_room", 0) >= 1, 10)

    made.remove(b)
    b.close()  # says goodbye on mDNS and on the websocket
    assert a.wait_for(lambda: b.ident.node_id not in a.connected(), 5)
    assert a.wait_for(lambda: b.ident.node_id not in a.lan_peers(), 5)
    assert f"lan:{b.ident.node_id}" not in a._dials  # no more redialing a node that left
