"""The relay on loopback: nodes exchange through it, a node on relay and LAN at once sees no
duplicates, and the relay's limits (size, rate, connections, replays, forgeries, dead clients)
each refuse and count. /healthz and /stats are served in-process with aiohttp's test client."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from swarm_util import RelayThread, batch_for

from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.peer import Outbox, handshake, read_raw
from sapo_edge.swarm.protocol import make_rollouts, room_hash, room_key
from sapo_edge.swarm.relay import Relay, RelayLimits


@pytest.fixture
def relay_of():
    made = []

    def make(**limits):
        r = RelayThread(**limits)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def nodes_in(r: RelayThread) -> int:
    return r.relay.stats()["nodes"]


def test_three_nodes_exchange_through_the_relay(relay_of, nodes) -> None:
    r = relay_of()
    a, b, c = (nodes(relay=r.url) for _ in range(3))
    assert r.wait_for(lambda: nodes_in(r) == 3)
    for n in (a, b, c):
        assert n.wait_for(lambda n=n: n.connected() == [f"relay:{r.url}"], 5)
    for n in (a, b, c):
        n.publish(batch_for(n.ident, 1))
    for n in (a, b, c):
        assert n.wait_for(lambda n=n: n.counters["delivered"] == 2, 5)
        assert {s for s, _ in n.receive()} == {m.ident.node_id for m in (a, b, c)} - {
            n.ident.node_id
        }
        assert "relay up, 2 nodes heard" in n.describe() and n.connected() == [f"relay:{r.url}"]
    assert r.call(r.relay.stats)["messages_forwarded"] == 6
    assert {p.connection for p in a.peers()} == {"relay"}


def test_a_node_on_relay_and_lan_at_once_sees_no_duplicates(relay_of, nodes) -> None:
    r = relay_of()
    a = nodes(relay=r.url)
    b = nodes(relay=r.url, peers=[f"127.0.0.1:{a.port}"])
    assert a.wait_for(lambda: len(a.connected()) == 2, 5) and r.wait_for(lambda: nodes_in(r) == 2)
    for i in range(3):
        a.publish(batch_for(a.ident, i + 1, start=10 * i))
    assert b.wait_for(lambda: b.counters["delivered"] == 3 and b.counters["duplicate"] == 3, 5)
    got = b.receive()
    assert len(got) == 3 and len({p for _, p in got}) == 3
    assert b.rejections() == {}  # the second copy is not held against anyone


def _client(r: RelayThread, ident: Identity, room: str = "default"):
    async def connect():
        session = aiohttp.ClientSession()
        ws = await session.ws_connect(f"{r.url}/ws")
        await handshake(
            ws, ident, room_hash(room), room_key(room, ""), timeout=2, expect_role="relay"
        )
        return session, ws

    return connect()


def _signed(ident: Identity, round_: int = 1, start: int = 0, room: str = "default") -> bytes:
    batch = batch_for(ident, round_, start=start)
    return make_rollouts(ident, room_hash(room), room_key(room, ""), batch, round_)[0]


def rejected(r: RelayThread, reason: str) -> int:
    return r.relay.stats()["rejected"].get(reason, 0)


def test_relay_refuses_forgeries_replays_floods_and_oversize(relay_of) -> None:
    r = relay_of(messages_per_minute=4, max_message_bytes=64 << 10, reject_threshold=100)
    me, other, listener = Identity.generate(), Identity.generate(), Identity.generate()

    async def go() -> None:
        s1, ws = await _client(r, me)
        s2, ear = await _client(r, listener)
        try:
            good = _signed(me)
            cases = [
                (_signed(other), "wrong_sender"),  # relaying someone else's batch as our own
                (good.replace(b"What", b"Wh4t", 1), "bad_signature"),
                (_signed(me, room="elsewhere"), "wrong_room"),
                (good, None),
                (good, "replay"),
                (b'{"type":"bye","reason":NaN,"message":""}', "non_finite"),
                (_signed(me, 2, 10), None),
                (_signed(me, 3, 20), None),
                (_signed(me, 4, 30), None),
                (_signed(me, 5, 40), "rate_limited"),  # 4 per minute
            ]
            for data, reason in cases:
                before = rejected(r, reason) if reason else r.relay.counters["forwarded"]
                await ws.send_bytes(data)
                if reason:
                    assert r.wait_for(lambda re=reason, b=before: rejected(r, re) > b), reason
                else:
                    assert r.wait_for(lambda b=before: r.relay.counters["forwarded"] > b)
            for _ in range(4):  # exactly the four good batches reached the other client
                raw = await read_raw(ear, timeout=5)
                assert isinstance(raw, bytes) and b'"type":"rollouts"' in raw
            await ws.send_bytes(b" " * (65 << 10))  # over the relay's message limit
            assert r.wait_for(lambda: rejected(r, "too_large") == 1)
        finally:
            for ws_, s in ((ws, s1), (ear, s2)):
                await ws_.close()
                await s.close()

    asyncio.run(go())
    assert r.wait_for(lambda: nodes_in(r) == 0)


def test_relay_limits_connections_per_ip_and_drops_dead_clients(relay_of) -> None:
    r = relay_of(connections_per_ip=2, heartbeat=0.3)

    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            ws1 = await s.ws_connect(f"{r.url}/ws", autoping=False)  # will never answer pings
            await handshake(ws1, Identity.generate(), room_hash("x"), b"", timeout=2)
            ws2 = await s.ws_connect(f"{r.url}/ws")
            with pytest.raises(aiohttp.WSServerHandshakeError) as e:
                await s.ws_connect(f"{r.url}/ws")
            assert e.value.status == 503
            assert r.relay.stats()["connections_refused"] == 1
            await ws2.close()
            while not ws1.closed:  # the relay gives up on the silent client
                await read_raw(ws1, timeout=5)
            assert r.wait_for(lambda: rejected(r, "no_pong") >= 1), r.relay.stats()["rejected"]

    asyncio.run(go())
    assert r.wait_for(lambda: r.relay.stats()["connections"] == 0)


@pytest.mark.asyncio
async def test_outbox_drops_the_oldest_when_a_client_is_slow() -> None:
    class Stuck:  # a websocket whose send never completes: the slowest possible peer
        closed = False

        async def send_bytes(self, data: bytes) -> None:
            await asyncio.Event().wait()

    box = Outbox(Stuck(), limit=3)
    for i in range(10):
        box.put(bytes([i]))
    assert (
        box.dropped == 7 and list(box.queue)[-3:] == [b"\x07", b"\x08", b"\x09"][-len(box.queue) :]
    )
    box.close()


@pytest.mark.asyncio
async def test_healthz_and_stats(aiohttp_client) -> None:
    relay = Relay(RelayLimits())
    client = await aiohttp_client(relay.make_app())
    assert (await client.get("/healthz")).status == 200
    stats = await (await client.get("/stats")).json()
    assert stats == {
        "rooms": 0,
        "nodes": 0,
        "connections": 0,
        "messages_forwarded": 0,
        "messages_dropped": 0,
        "connections_refused": 0,
        "rejected": {},
    }


class ForgingRelay(Relay):
    """A relay gone bad: it rewrites every answer it forwards."""

    async def _forward(self, client, msg) -> None:
        body = msg.body.replace("<answer>", "<answer>1")
        await super()._forward(
            client, type(msg)(msg.sender, msg.public_key, body, msg.signature, msg.mac)
        )


def test_a_relay_cannot_forge_what_it_forwards(relay_of, nodes) -> None:
    r = relay_of()
    r.relay.__class__ = ForgingRelay
    a, b = nodes(relay=r.url), nodes(relay=r.url)
    relay_key = f"relay:{r.url}"
    for n in (a, b):
        assert n.wait_for(lambda n=n: n.connected() == [relay_key], 5)
    a.publish(batch_for(a.ident, 1))
    assert b.wait_for(lambda: b.rejections(relay_key)["bad_signature"] == 1, 5)
    assert b.receive() == [] and b.rejections(a.ident.node_id) == {}  # a is not blamed


def test_relay_caps_connections_in_total_and_a_reconnect_replaces_the_old_link(relay_of) -> None:
    r = relay_of(connections_total=2)
    me = Identity.generate()

    async def go() -> None:
        s1, old = await _client(r, me)
        s2, new = await _client(r, me)  # the same key again, e.g. after a network change
        try:
            raw = await read_raw(old, timeout=5)
            assert isinstance(raw, bytes) and b'"reason":"replaced"' in raw
            assert r.wait_for(lambda: nodes_in(r) == 1 and r.relay.connections == 1)
            async with aiohttp.ClientSession() as s:
                other = await s.ws_connect(f"{r.url}/ws")  # the second of two allowed
                with pytest.raises(aiohttp.WSServerHandshakeError):
                    await s.ws_connect(f"{r.url}/ws")
                await other.close()
            assert r.relay.stats()["connections_refused"] == 1
        finally:
            for ws, s in ((old, s1), (new, s2)):
                await ws.close()
                await s.close()

    asyncio.run(go())
