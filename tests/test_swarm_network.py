"""Nodes on loopback: three exchange rollouts directly; every bad input a peer can send is
refused and counted with its reason, without crashing or losing good batches; floods are muted;
a peer that stops answering pings is dropped."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from swarm_util import batch_for, group

from sapo_edge.rollout import encode_batch
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.peer import HandshakeError, handshake, read_raw
from sapo_edge.swarm.protocol import make_hello, make_rollouts, new_nonce, room_hash, room_key


def url(node) -> str:
    return f"ws://127.0.0.1:{node.port}/ws"


def test_three_nodes_exchange_rollouts_directly(nodes) -> None:
    a = nodes()
    b = nodes(peers=[f"127.0.0.1:{a.port}"])
    c = nodes(peers=[f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"])
    for n in (a, b, c):
        assert n.wait_for(lambda n=n: len(n.connected()) == 2, 5), n.describe()
    for n in (a, b, c):
        n.publish(batch_for(n.ident, 1))
    for n in (a, b, c):
        assert n.wait_for(lambda n=n: n.counters["delivered"] == 2, 5)
        got = n.receive()
        senders = {s for s, _ in got}
        assert senders == {m.ident.node_id for m in (a, b, c)} - {n.ident.node_id}
        assert all(
            payload == batch_for(next(m.ident for m in (a, b, c) if m.ident.node_id == s), 1)
            for s, payload in got
        )
        assert n.receive() == []  # drained
        assert "2 peers connected" in n.describe()
    a.publish(batch_for(b.ident, 2))  # not a's groups: never sent (every peer would refuse it)
    assert a.counters["published"] == 1
    rows = {p.node_id: p for p in a.peers()}
    assert rows[b.ident.node_id].accepted == 2 and rows[b.ident.node_id].name == b.ident.name
    assert rows[c.ident.node_id].connection == "manual" and rows[c.ident.node_id].connected


async def _client(node, ident, room="default", secret="", **ws_kw):
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(url(node), **ws_kw)
    await handshake(ws, ident, room_hash(room), room_key(room, secret), timeout=2)
    return session, ws


def _signed(ident, room="default", secret="", round_=1, start=0, **kw) -> bytes:
    return make_rollouts(
        ident,
        room_hash(room),
        room_key(room, secret),
        batch_for(ident, round_, start=start),
        round_,
        **kw,
    )[0]


def test_every_bad_input_is_refused_and_counted_and_good_batches_still_arrive(nodes) -> None:
    node = nodes(reject_threshold=1000, stale_rounds=3)
    me, other = Identity.generate(), Identity.generate()
    good_once = _signed(me, round_=10, start=50)
    foreign = encode_batch([group(other.node_id)])
    cases = [
        (b"[" * 100 + b"]" * 100, "too_deep"),
        (b'{"type":"bye","reason":NaN,"message":""}', "non_finite"),
        (b'{"type":"bye","reason":Infinity,"message":""}', "non_finite"),
        (b'{"type":"bye","reason":1' + b"0" * 40 + b',"message":""}', "huge_int"),
        (b'{"type":"bye","type":"bye","reason":"a","message":""}', "duplicate_key"),
        (b'{"type":"bye","reason":"\\udc00","message":""}', "bad_unicode"),
        (b"\xff\xfe\xfd", "bad_utf8"),
        (b'{"type":"bye","reason":[],"message":""}', "bad_type"),
        (b'{"type":"rollouts"}', "missing_field"),
        (
            make_hello(me, room_hash("default"), new_nonce()).replace(
                b'"version":1', b'"version":9'
            ),
            "unknown_version",
        ),
        (_signed(me).replace(b'"signature":"', b'"signature":"00', 1)[:-1] + b"}", "bad_value"),
        (_signed(me, sent_at=time.time() - 86400), "expired"),
        (_signed(me, room="other-room"), "wrong_room"),
        (_signed(me, secret="wrong"), "wrong_secret"),
        (
            make_rollouts(me, room_hash("default"), room_key("default", ""), foreign, 1)[0],
            "wrong_producer",
        ),
        (_signed(other), "wrong_sender"),
        (good_once, None),
        (good_once, "replay"),
        (_signed(me, round_=2), "stale_round"),
        (make_hello(me, room_hash("default"), new_nonce()), "unexpected_message"),
    ]
    # a signature that is valid hex but wrong: flip the first byte of a real one
    msg = json.loads(_signed(me, start=90))
    msg["signature"] = ("00" if msg["signature"][:2] != "00" else "11") + msg["signature"][2:]
    cases.append((json.dumps(msg).encode(), "bad_signature"))

    async def go() -> None:
        session, ws = await _client(node, me)
        try:
            for data, reason in cases:
                before = (
                    node.rejections(me.node_id)[reason] if reason else node.counters["delivered"]
                )
                await ws.send_bytes(data)
                if reason is None:
                    ok = await asyncio.to_thread(
                        node.wait_for, lambda b=before: node.counters["delivered"] > b, 5
                    )
                else:
                    ok = await asyncio.to_thread(
                        node.wait_for,
                        lambda r=reason, b=before: node.rejections(me.node_id)[r] > b,
                        5,
                    )
                assert ok, f"{reason} was not counted: {node.rejections(me.node_id)}"
            # the link survived all of it: a fresh good batch still arrives
            await ws.send_bytes(_signed(me, round_=11, start=70))
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.counters["delivered"] == 2, 5
            )
            # an oversize message is refused by the websocket layer, counted, and closes the link
            await ws.send_bytes(b" " * ((1 << 20) + 10))
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.rejections(me.node_id)["too_large"] == 1, 5
            )
        finally:
            await ws.close()
            await session.close()

    asyncio.run(go())
    assert [s for s, _ in node.receive()] == [me.node_id, me.node_id]
    row = next(p for p in node.peers() if p.node_id == me.node_id)
    assert row.rejected == len(cases) - 1 + 1 and row.accepted == 4


def test_handshake_refusals_are_counted_and_told(nodes) -> None:
    node = nodes(secret="s3cret")
    me = Identity.generate()

    async def attempt(ident, room, secret) -> str:
        async with aiohttp.ClientSession() as s, s.ws_connect(url(node)) as ws:
            try:
                await handshake(ws, ident, room_hash(room), room_key(room, secret), timeout=2)
            except HandshakeError as e:
                return e.reason
            return "accepted"

    assert asyncio.run(attempt(me, "default", "guess")) == "wrong_secret"
    assert asyncio.run(attempt(me, "default", "")) == "wrong_secret"  # no secret: nothing exchanged
    assert asyncio.run(attempt(me, "another", "s3cret")) == "wrong_room"
    assert asyncio.run(attempt(node.ident, "default", "s3cret")) == "same_identity"
    want = {"wrong_secret": 2, "wrong_room": 1, "same_identity": 1}
    assert node.wait_for(lambda: node.rejections("ip:127.0.0.1") == want, 5), node.rejections()
    assert asyncio.run(attempt(me, "default", "s3cret")) == "accepted"


def test_two_nodes_with_one_identity_are_told_so(nodes) -> None:
    twin = Identity.generate()
    logs: list[str] = []
    a = nodes(ident=twin, log=logs.append)
    b = nodes(peers=[f"127.0.0.1:{a.port}"])  # a different node, for contrast
    assert a.wait_for(lambda: len(a.connected()) == 1, 5)
    c = nodes(ident=twin, peers=[f"127.0.0.1:{a.port}"], log=logs.append)
    assert a.wait_for(lambda: a.rejections("ip:127.0.0.1")["same_identity"] >= 1, 5)
    assert c.wait_for(lambda: any("identity.key" in m for m in logs), 5)
    assert c.connected() == [] and a.connected() == [b.ident.node_id]


def test_a_flooding_peer_is_muted_and_its_batches_dropped(nodes) -> None:
    node = nodes(reject_threshold=5, mute_base=60)
    me = Identity.generate()

    async def go() -> None:
        session, ws = await _client(node, me)
        try:
            for _ in range(5):
                await ws.send_bytes(b"{nope")
            raw = await read_raw(ws, timeout=5)  # the node says why, then hangs up
            assert isinstance(raw, bytes) and b'"reason":"muted"' in raw
        finally:
            await ws.close()
            await session.close()
        async with aiohttp.ClientSession() as s, s.ws_connect(url(node)) as ws2:
            await handshake(ws2, me, room_hash("default"), room_key("default", ""), timeout=2)
            raw = await read_raw(ws2, timeout=5)  # still muted on reconnect: told, hung up on
            assert isinstance(raw, bytes) and b'"reason":"muted"' in raw

    asyncio.run(go())
    assert node.counters["muted"] == 1 and node.rejections(me.node_id)["bad_json"] == 5
    assert node.receive() == [] and next(p for p in node.peers() if p.node_id == me.node_id).muted


def test_a_flood_of_valid_batches_is_rate_limited_and_crowds_out_no_one(nodes) -> None:
    node = nodes(max_batches_per_minute=5, reject_threshold=1000)
    flooder, polite = Identity.generate(), Identity.generate()

    async def go() -> None:
        s1, ws1 = await _client(node, flooder)
        s2, ws2 = await _client(node, polite)
        try:
            for i in range(20):
                await ws1.send_bytes(_signed(flooder, start=2 * i))
            await ws2.send_bytes(_signed(polite))
            done = lambda: node.rejections(flooder.node_id)["rate_limited"] == 15  # noqa: E731
            assert await asyncio.to_thread(node.wait_for, done, 5)
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.counters["delivered"] == 6, 5
            )
        finally:
            for ws, s in ((ws1, s1), (ws2, s2)):
                await ws.close()
                await s.close()

    asyncio.run(go())
    senders = [s for s, _ in node.receive()]
    assert senders.count(flooder.node_id) == 5 and senders.count(polite.node_id) == 1


def test_a_peer_that_never_answers_pings_is_dropped(nodes) -> None:
    node = nodes(heartbeat=0.3)
    me = Identity.generate()

    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.ws_connect(url(node), autoping=False) as ws:
            await handshake(ws, me, room_hash("default"), room_key("default", ""), timeout=2)
            assert await asyncio.to_thread(node.wait_for, lambda: me.node_id in node.connected(), 5)
            # read (and ignore) pings until the node gives up on us
            while not ws.closed:
                await read_raw(ws, timeout=5)

    asyncio.run(go())
    assert node.wait_for(lambda: me.node_id not in node.connected(), 5)
    assert node.rejections(me.node_id)["no_pong"] == 1
