"""A removal replaces the room's key (issue 57 #1): the removed laptop held the room's secret, so a
modified client could link to classmates and send them groups under a fresh identity. The host
replaces the secret parts of the keys, gives the new secret to every member it admitted over that
member's own link, and a later welcome carries it; replaced keys are accepted for a grace period,
and after it on the host only from members it admitted (swarm/keyring.py, room_secret.py).

The attack runs for real here: a fresh identity with the old keys dials a classmate and sends a
sealed batch through the class's relay. Without the replacement both succeed."""

from __future__ import annotations

import asyncio
import os

import pytest
import test_classroom
from scripted import Quiet
from swarm_util import FAST, batch_for, keys_of
from test_classroom import linked, node_of, run_rounds_in_step, student

from sapo_edge.swarm.handshake import HandshakeError, handshake
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.keyring import KeyRing
from sapo_edge.swarm.network import NetworkTransport
from sapo_edge.swarm.protocol import Rekey
from sapo_edge.swarm.room_secret import RoomSecret

host = test_classroom.host
GRACE = 0.3  # the tests' grace period (GRACE_S is a minute)


def test_a_removal_replaces_the_room_key_and_the_removed_laptops_old_key_opens_nothing(
    host, tmp_path
) -> None:
    idents = {n: Identity.generate() for n in ("ada", "bob", "cy")}
    joined = {n: student(host, tmp_path, n, idents[n]) for n in idents}
    transports = [host.transport] + [j.transport for j in joined.values()]
    for t in transports:
        t.core.ring.grace_s = GRACE
    for j in joined.values():
        j.transport.start()
    for j in joined.values():
        linked(j)
    old = host.transport.keys
    assert all(t.keys == old for t in transports)

    assert host.remove("cy").startswith("removed cy")
    ada, bob = joined["ada"].transport, joined["bob"].transport
    assert host.transport.wait_for(lambda: host.transport.keys != old, 10)
    for t in (ada, bob):  # each took the new secret over its own link to the host
        assert t.wait_for(lambda t=t: t.keys == host.transport.keys, 10), dict(t.counters)
    new = host.transport.keys
    assert new.batch_key != old.batch_key and new.link_psk != old.link_psk
    assert (new.lan_id, new.relay_id) == (old.lan_id, old.relay_id)  # adverts, routes unchanged
    assert joined["cy"].removed.wait(10)  # the word that removed it was sealed so it could read it
    assert joined["cy"].transport.keys == old  # and nothing gave it the new key
    assert host.admissions.grant.rekey  # a later welcome carries it

    # the removed laptop's modified client: a fresh identity, the old keys, after the grace
    asyncio.run(asyncio.sleep(GRACE + 0.2))
    ada_port = ada.listener.port
    attacker = NetworkTransport(
        Identity.generate(),
        keys=old,
        **{**FAST, "peers": [f"127.0.0.1:{ada_port}"], "relay": joined["ada"].relay},
    ).start()
    try:
        refused_before = ada.counters["rejected:wrong_secret"]
        # it dials a classmate: the handshake fails (the old link key is refused)
        assert ada.wait_for(lambda: ada.counters["rejected:wrong_secret"] > refused_before, 10)
        assert attacker.ident.node_id not in {p.node_id for p in ada.peers() if p.connected}
        # it sends groups through the class's relay: sealed under the old key, nobody opens them
        assert attacker.wait_for(
            lambda: any(k.startswith("relay:") for k in attacker.connected()), 10
        )
        before = {t: t.counters["rejected:wrong_secret"] for t in (ada, bob)}
        for i in range(3):
            attacker.publish(batch_for(attacker.ident, round_=1, start=10 * i))
        for t in (ada, bob):
            assert t.wait_for(lambda t=t: t.counters["rejected:wrong_secret"] > before[t], 10)
            assert all(sender != attacker.ident.node_id for sender, _ in t.intake.inbox.items)
    finally:
        attacker.close()

    # the class goes on under the new key: its members' batches arrive and are trained on
    nodes = [node_of(host.cfg, host.transport, "teacher", host.member_callback(Quiet()))]
    nodes += [
        node_of(joined[n].cfg, joined[n].transport, n, joined[n].callback(Quiet()))
        for n in ("ada", "bob")
    ]
    run_rounds_in_step(nodes, host, 2)

    # a newcomer after the removal is welcomed with the new key and links to a classmate
    dan = student(host, tmp_path, "dan")
    try:
        assert dan.transport.keys == new
        dan.transport.start()
        linked(dan)
    finally:
        dan.transport.close()


def test_the_host_gives_a_replaced_key_to_admitted_members_only_and_the_grace_ends() -> None:
    now = [0.0]
    ring = KeyRing(
        keys_of("lab", "a passphrase of some length"), grace_s=60.0, clock=lambda: now[0]
    )
    old = ring.current
    assert ring.replace(os.urandom(32))
    assert ring.accepted() == (ring.current, old)  # a classmate not yet told: its batches open
    assert ring.older_psks("stranger") == (old.link_psk,)
    now[0] = 61.0
    assert ring.accepted() == (ring.current,)  # after the grace, only the new key
    assert ring.older_psks("stranger") == ()
    ring.may_hold_old = {"asleep"}.__contains__  # the host: a member it admitted, away then
    assert ring.older_psks("asleep") == (old.link_psk,)
    assert not ring.replace(ring.secret)  # the secret in force again changes nothing
    newer = ring.current
    first = ring.secret
    assert ring.replace(os.urandom(32)) and not ring.replace(first)  # a stale word: ignored
    assert ring.current != newer and ring.secret != first
    late = KeyRing(old, grace_s=60.0, clock=lambda: now[0])
    late.replace(os.urandom(32), age=61.0)  # heard a minute after the host replaced them
    assert late.accepted() == (late.current,) and late.older_psks("stranger") == ()
    fresh = KeyRing(old)
    fresh.replace(ring.secret, grace=False)  # a welcome's: nothing old is accepted
    assert fresh.current == ring.current and fresh.accepted() == (fresh.current,)


def test_a_listener_accepts_a_replaced_link_key_only_where_told() -> None:
    """The handshake itself: the dialer's old link key opens a link only with a listener that
    accepts it (keyring's older_psks), and the refusal says wrong_secret."""
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    old, new = os.urandom(32), os.urandom(32)
    room = keys_of("lab").lan_id

    async def attempt(accepts: tuple[bytes, ...]) -> str:
        ident_l, ident_d = Identity.generate(), Identity.generate()
        result: dict[str, str] = {}

        async def serve(request):
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            try:
                await handshake(
                    ws, ident_l, room, new, initiator=False, timeout=5, older=lambda _id: accepts
                )
                result["listener"] = "ok"
            except HandshakeError as e:
                result["listener"] = e.reason
            return ws

        app = web.Application()
        app.router.add_get("/ws", serve)
        async with TestClient(TestServer(app)) as client:
            ws = await client.ws_connect("/ws")
            try:
                await handshake(ws, ident_d, room, old, initiator=True, timeout=5)
                result["dialer"] = "ok"
            except HandshakeError as e:
                result["dialer"] = e.reason
            await ws.close()
        return result["listener"]

    assert asyncio.run(attempt(())) == "wrong_secret"
    assert asyncio.run(attempt((os.urandom(32), old))) == "ok"


def test_a_new_secret_is_heeded_from_the_host_alone() -> None:
    class Net:  # what RoomSecret reads of a NetworkTransport
        def __init__(self):
            self.core = type("Core", (), {})()
            self.core.ring = KeyRing(keys_of("lab", "a passphrase of some length"))
            self.core.count = lambda *_a: None
            self.core.log = lambda _t: None
            self._loop = None

    net = Net()
    secret = RoomSecret(net)
    secret.heed("ab" * 16)
    before = net.core.ring.current
    assert not secret.heard("cd" * 16, Rekey(os.urandom(32), 0))  # a classmate's: charged, ignored
    assert net.core.ring.current == before
    assert secret.heard("ab" * 16, Rekey(os.urandom(32), 0))
    assert net.core.ring.current != before
    assert secret.first_words("ab" * 16) is None  # a member gives no secret to anyone


def _remove(host, who: str):
    old = host.transport.keys
    assert host.remove(who).startswith(f"removed {who}")
    assert host.transport.wait_for(lambda: host.transport.keys != old, 10)
    return old


def _attacker(keys, peer_port: int) -> NetworkTransport:
    """A modified client: a fresh identity holding `keys`, dialing a classmate's address."""
    return NetworkTransport(
        Identity.generate(), keys=keys, **{**FAST, "peers": [f"127.0.0.1:{peer_port}"]}
    ).start()


def test_a_removal_retires_the_code_the_removed_laptop_saw(host, tmp_path) -> None:
    """Found by review: the code on the screen gave the removed laptop, under a fresh identity,
    the new key in its welcome. A removal shows a new code; the old one admits nobody."""
    from sapo_edge.classroom.join import JoinError, join_class

    joined = {n: student(host, tmp_path, n) for n in ("ada", "cy")}
    for j in joined.values():
        j.transport.start()
        linked(j)
    seen = host.code
    _remove(host, "cy")
    assert host.code != seen
    local = dict(out_dir=str(tmp_path / "evil"), name="fresh", listen="127.0.0.1:0", mdns=False)
    with pytest.raises(JoinError):
        join_class(seen, local, identity=Identity.generate(), log=lambda _m: None)


def test_a_member_away_at_the_removal_gets_no_fresh_grace(host, tmp_path) -> None:
    """Found by review: a member that heard the new key late accepted the old one from anyone
    for a grace of its own. The host's rekey says how long ago it replaced the keys."""
    joined = {n: student(host, tmp_path, n) for n in ("ada", "cy", "mo")}
    for t in [host.transport] + [j.transport for j in joined.values()]:
        t.core.ring.grace_s = GRACE
    for n in ("ada", "cy"):
        joined[n].transport.start()
        linked(joined[n])
    mo = joined["mo"].transport
    mo.core.ring.grace_s = 3.0  # long enough for the attacker to dial within it, were it fresh
    old = _remove(host, "cy")
    asyncio.run(asyncio.sleep(3.5))  # mo was away all the while: past its grace, too
    mo.start()
    assert mo.wait_for(lambda: mo.keys == host.transport.keys, 10)  # from the host, on its link
    attacker = _attacker(old, mo.listener.port)
    try:  # it dials again and again (within what a fresh grace would be): never linked
        assert not mo.wait_for(lambda: attacker.ident.node_id in mo.connected(), 2.5)
        assert attacker.counters["rejected:wrong_secret"] >= 2  # its own count of refusals
    finally:
        attacker.close()


def test_a_link_opened_under_the_old_key_is_closed_when_its_grace_ends(host, tmp_path) -> None:
    """Found by review: a fresh identity that linked with the room's key before the removal
    stayed linked (holding a classmate's link slot). Links under a replaced key close at the
    grace's end; members re-link under the new key."""
    joined = {n: student(host, tmp_path, n) for n in ("ada", "cy")}
    for t in [host.transport] + [j.transport for j in joined.values()]:
        t.core.ring.grace_s = GRACE
    for j in joined.values():
        j.transport.start()
        linked(j)
    ada = joined["ada"].transport
    attacker = _attacker(ada.keys, ada.listener.port)  # cy's second identity, before its removal
    try:
        assert ada.wait_for(lambda: attacker.ident.node_id in ada.connected(), 10)
        _remove(host, "cy")
        assert ada.wait_for(lambda: attacker.ident.node_id not in ada.connected(), 10)
        assert ada.counters["links_closed_replaced_key"] >= 1
        linked(joined["ada"])  # ada itself is back on the host's address under the new key
        asyncio.run(asyncio.sleep(1.0))
        assert attacker.ident.node_id not in ada.connected()  # and the attacker stays out
    finally:
        attacker.close()


def test_a_removed_laptop_away_at_the_removal_is_told_when_it_comes_back(host, tmp_path) -> None:
    """Found by review: the host's word is said again under the new key, which a laptop away at
    its removal never gets. The host lets its old key in, to refuse it as removed, and the
    student takes that refusal inside the host's authenticated link as the teacher's word."""
    joined = {n: student(host, tmp_path, n) for n in ("ada", "cy")}
    for t in [host.transport] + [j.transport for j in joined.values()]:
        t.core.ring.grace_s = GRACE
    joined["ada"].transport.start()
    linked(joined["ada"])
    _remove(host, "cy")
    asyncio.run(asyncio.sleep(GRACE + 0.5))
    joined["cy"].transport.start()  # it comes back, after the grace
    assert joined["cy"].removed.wait(10)
    assert "removed this laptop" in joined["cy"].continue_command(headless=True, more=False)
