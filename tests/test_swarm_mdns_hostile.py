"""mDNS adverts from a hostile host on the LAN, in a network namespace this test creates (Linux,
root, `ip`; skipped otherwise with the reason; marked netns like test_chaos_lan: `make chaos`):
two nodes of a room discover each other over a veth link, and a host in another namespace
(tests/mdns_attacker.py) sends crafted answers onto it: goodbyes for the real nodes, 300 fake
nodes of the room, an advert pointing at this laptop's loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from swarm_util import net

from sapo_edge.swarm.dialing import MAX_LAN_DIALS
from sapo_edge.swarm.discovery import MAX_FOUND

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from chaos_lan import can_netns  # noqa: E402

ATTACKER = Path(__file__).with_name("mdns_attacker.py")
pytestmark = pytest.mark.netns


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def veth_lan():
    """(this side's address, the hostile host's address, its namespace), torn down after."""
    why = can_netns()
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:6]
    ns, here_if, there_if = f"sapo-evil-{tag}", f"sapoh{tag}", f"sapoe{tag}"
    octet = int(tag[:2], 16) % 250 + 1
    here, there = f"10.213.{octet}.1", f"10.213.{octet}.2"
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", here_if, "type", "veth", "peer", "name", there_if)
        _ip("link", "set", there_if, "netns", ns)
        _ip("addr", "add", f"{here}/24", "dev", here_if)
        _ip("link", "set", here_if, "up")
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{there}/24", "dev", there_if)
        _ip("netns", "exec", ns, "ip", "link", "set", there_if, "up")
    except (subprocess.CalledProcessError, OSError) as e:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", here_if], capture_output=True)
        pytest.skip(f"cannot make a network namespace here: {e}")
    yield here, there, ns
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
    subprocess.run(["ip", "link", "del", here_if], capture_output=True, timeout=10)


def attack(ns: str, there: str, actions: list) -> None:
    payload = json.dumps({"ip": there, "actions": actions})
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, str(ATTACKER), payload],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "sent" in out.stdout, out.stderr[-2000:]


@pytest.fixture
def pair(veth_lan):
    here, there, ns = veth_lan
    room = f"test-{uuid.uuid4().hex[:8]}"
    made = []

    def make():
        n = net(mdns=True, mdns_interfaces=[here], listen=f"{here}:0", room=room)
        made.append(n)
        return n

    a, b = make(), make()
    for n, other in ((a, b), (b, a)):
        assert n.wait_for(lambda n=n, o=other: o.ident.node_id in n.connected(), 15), n.describe()
    yield a, b, there, ns
    for n in made:
        n.close()


def _drop_link(a, b_id: str):
    link = a.table.links.get(b_id)
    assert link is not None, "the link was already gone"
    asyncio.run_coroutine_threadsafe(link.ws.close(), a._loop).result(5)
    return link


def test_spoofed_goodbyes_do_not_stop_nodes_redialing_each_other(pair) -> None:
    """Anyone on the LAN can send an mDNS goodbye for any node. It used to cancel the dial
    loop at once, which also cut the live link the loop had dialed, and then neither side
    dialed the other again: two spoofed packets split a room's LAN for good."""
    a, b, there, ns = pair
    ids = (a.ident.node_id, b.ident.node_id)
    attack(ns, there, [["goodbyes", list(ids)]])
    assert a.wait_for(lambda: ids[1] not in a.lan_peers(), 10)  # the goodbye was heard
    assert b.wait_for(lambda: ids[0] not in b.lan_peers(), 10)
    assert ids[1] in a.connected() and ids[0] in b.connected()  # the live link is untouched
    assert a.counters["lan_goodbyes"] >= 1 and b.counters["lan_goodbyes"] >= 1
    dropped = _drop_link(a, ids[1])  # a blip
    # that link ends (a redial may already have replaced it: a new link object is fine too)
    assert a.wait_for(lambda: a.table.links.get(ids[1]) is not dropped, 10)
    assert a.wait_for(lambda: ids[1] in a.connected(), 15), a.describe()
    assert b.wait_for(lambda: ids[0] in b.connected(), 15), b.describe()


def test_a_crowd_of_fake_adverts_and_one_at_loopback_cost_bounded_dials(pair) -> None:
    """300 fake nodes of the room (its lan id is in every advert) at the hostile host's address,
    and one advert pointing at a service on this laptop's loopback: dials stay bounded, the
    loopback service is never dialed, the real link stays up."""
    a, b, there, ns = pair
    canary = socket.socket()
    canary.bind(("127.0.0.1", 0))
    canary.listen(8)
    canary.settimeout(0.2)
    dialed: list = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                dialed.append(canary.accept()[0])
            except TimeoutError:
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        room = a.room
        fakes = [[uuid.uuid4().hex, room, there, 9] for _ in range(300)]
        loop_id = uuid.uuid4().hex
        attack(
            ns,
            there,
            [
                ["adverts", [[loop_id, room, "127.0.0.1", canary.getsockname()[1]]]],
                ["adverts", fakes],
            ],
        )
        disc = a.dialer.discovery
        seen = lambda: dialed or disc.ignored.get("bad_address", 0) >= 1  # noqa: E731
        assert a.wait_for(seen, 20), disc.ignored
        assert dialed == []  # an advert from the LAN got this laptop to dial its own loopback
        assert a.wait_for(lambda: len(disc.found) + sum(disc.ignored.values()) >= 60, 20)
        assert len(disc.found) <= MAX_FOUND and len(a.dialer.lan_dials) <= MAX_LAN_DIALS
        assert b.ident.node_id in a.connected() and a.ident.node_id in b.connected()
        assert loop_id not in a.dialer.lan_dials and dialed == []
    finally:
        stop.set()
        watcher.join(5)
        canary.close()
        for s in dialed:
            s.close()
