"""Nodes on loopback: three exchange rollouts directly; every bad input a peer can send is
refused and counted with its reason, without crashing or losing good batches; floods are muted;
a peer that stops answering pings is dropped."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import pytest
from swarm_util import (
    FAST,
    KEYS,
    WAIT,
    Client,
    batch_for,
    connect,
    envelope,
    group,
    keys_of,
    read_until_closed,
    sealed,
)

from sapo_edge.data.rollout import encode_batch
from sapo_edge.swarm.batches import make_rollouts, seal
from sapo_edge.swarm.handshake import HandshakeError
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.network import NetworkTransport
from sapo_edge.swarm.peer import Closed
from sapo_edge.swarm.protocol import make_bye, make_hello, new_nonce, parse_message
from sapo_edge.swarm.roomkey import new_room_key


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


async def _client(node, ident, keys=None, **ws_kw) -> Client:
    return await connect(url(node), ident, keys, **ws_kw)


def test_every_bad_input_is_refused_and_counted_and_good_batches_still_arrive(nodes) -> None:
    node = nodes(reject_threshold=1000, stale_rounds=3)
    me, other = Identity.generate(), Identity.generate()
    good_once = sealed(me, round_=10, start=50)
    foreign = encode_batch([group(other.node_id)])
    other_room = keys_of("other-room", new_room_key())
    msg = json.loads(envelope(me, start=90))  # a valid-hex signature that is wrong
    msg["signature"] = ("00" if msg["signature"][:2] != "00" else "11") + msg["signature"][2:]
    M, S = "message", "sealed"  # inside the encrypted link: a control message or a sealed batch
    cases = [
        (M, b"[" * 100 + b"]" * 100, "too_deep"),
        (M, b'{"type":"bye","reason":NaN,"message":""}', "non_finite"),
        (M, b'{"type":"bye","reason":Infinity,"message":""}', "non_finite"),
        (M, b'{"type":"bye","reason":1' + b"0" * 40 + b',"message":""}', "huge_int"),
        (M, b'{"type":"bye","type":"bye","reason":"a","message":""}', "duplicate_key"),
        (M, b'{"type":"bye","reason":"\\udc00","message":""}', "bad_unicode"),
        (M, b"\xff\xfe\xfd", "bad_utf8"),
        (M, b'{"type":"bye","reason":[],"message":""}', "bad_type"),
        (M, b'{"type":"rollouts"}', "missing_field"),
        (M, make_hello(me, KEYS.lan_id, new_nonce(), b"\x01" * 32), "unexpected_message"),
        (S, b"short", "bad_frame"),
        (S, seal(KEYS, b"{nope"), "bad_json"),
        (S, seal(KEYS, make_bye("shutdown", "x")), "unexpected_message"),
        (S, seal(KEYS, envelope(me).replace(b'"signature":"', b'"signature":"00', 1)), "bad_value"),
        (S, sealed(me, sent_at=time.time() - 86400), "expired"),
        (S, seal(KEYS, envelope(me, other_room)), "wrong_room"),  # signed for another room
        (S, sealed(me, other_room), "wrong_secret"),  # sealed with another room's key
        (S, seal(KEYS, make_rollouts(me, KEYS, foreign, 1)[0]), "wrong_producer"),
        (S, sealed(other), "wrong_sender"),
        (S, good_once, None),
        (S, good_once, "replay"),
        (S, sealed(me, round_=2), "stale_round"),
        (S, seal(KEYS, json.dumps(msg).encode()), "bad_signature"),
    ]

    async def go() -> None:
        c = await _client(node, me)
        try:
            for kind, data, reason in cases:
                before = (
                    node.rejections(me.node_id)[reason] if reason else node.counters["delivered"]
                )
                await (c.send_message(data) if kind == M else c.send_sealed(data))
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
            await c.send_sealed(sealed(me, round_=11, start=70))
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.counters["delivered"] == 2, 5
            )
            # an oversize message is refused by the websocket layer before any decryption:
            # junk nobody proved they sent, so it closes the link and is charged to the address
            await c.ws.send_bytes(b" " * ((1 << 20) + 300))
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.rejections("ip:127.0.0.1")["too_large"] == 1, 5
            )
        finally:
            await c.close()

    asyncio.run(go())
    assert [s for s, _ in node.receive()] == [me.node_id, me.node_id]
    row = next(p for p in node.peers() if p.node_id == me.node_id)
    assert row.rejected == len(cases) - 1 and row.accepted == 4
    assert not row.muted


def test_handshake_refusals_are_counted_and_told(nodes) -> None:
    code = new_room_key()
    node = nodes(secret=code)
    me = Identity.generate()

    async def attempt(ident, keys) -> str:
        try:
            c = await _client(node, ident, keys)
        except HandshakeError as e:
            return e.reason
        await c.close()
        return "accepted"

    guess = keys_of("default", new_room_key())
    lan_only = dataclasses.replace(guess, lan_id=keys_of("default", code).lan_id)
    assert asyncio.run(attempt(me, guess)) == "wrong_room"  # another key is another room
    assert asyncio.run(attempt(me, lan_only)) == "wrong_secret"  # its lan id, not its key
    assert asyncio.run(attempt(me, keys_of())) == "wrong_room"  # no secret: nothing exchanged
    assert asyncio.run(attempt(node.ident, keys_of("default", code))) == "same_identity"
    want = {"wrong_secret": 1, "wrong_room": 2, "same_identity": 1}
    assert node.wait_for(lambda: node.rejections("ip:127.0.0.1") == want, 5), node.rejections()
    assert asyncio.run(attempt(me, keys_of("default", code))) == "accepted"
    assert node.rejections(me.node_id) == {}  # nothing a stranger did is held against an id


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

    def told_muted(frame) -> bool:
        return not isinstance(frame, Closed) and parse_message(frame[1]).reason == "muted"

    async def go() -> None:
        c = await _client(node, me)
        try:
            for _ in range(5):
                await c.send_message(b"{nope")
            assert told_muted(await c.recv())  # the node says why, then hangs up
        finally:
            await c.close()
        c2 = await _client(node, me)
        try:
            assert told_muted(await c2.recv())  # still muted on reconnect: told, hung up on
        finally:
            await c2.close()

    asyncio.run(go())
    assert node.counters["muted"] == 1 and node.rejections(me.node_id)["bad_json"] == 5
    assert node.receive() == [] and next(p for p in node.peers() if p.node_id == me.node_id).muted


def test_a_flood_of_valid_batches_is_rate_limited_and_crowds_out_no_one(nodes) -> None:
    node = nodes(max_batches_per_minute=5, reject_threshold=1000)
    flooder, polite = Identity.generate(), Identity.generate()

    async def go() -> None:
        c1 = await _client(node, flooder)
        c2 = await _client(node, polite)
        try:
            for i in range(20):
                await c1.send_sealed(sealed(flooder, start=2 * i))
            await c2.send_sealed(sealed(polite))
            done = lambda: node.rejections(flooder.node_id)["rate_limited"] == 15  # noqa: E731
            assert await asyncio.to_thread(node.wait_for, done, WAIT)
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.counters["delivered"] == 6, WAIT
            )
        finally:
            await c1.close()
            await c2.close()

    asyncio.run(go())
    senders = [s for s, _ in node.receive()]
    assert senders.count(flooder.node_id) == 5 and senders.count(polite.node_id) == 1


def test_a_peer_that_never_answers_pings_is_dropped(nodes) -> None:
    node = nodes(heartbeat=0.3)
    me = Identity.generate()

    async def go() -> None:
        c = await _client(node, me, autoping=False)
        try:
            assert await asyncio.to_thread(node.wait_for, lambda: me.node_id in node.connected(), 5)
            # read (and ignore) pings until the node gives up on us
            await read_until_closed(c.ws)
        finally:
            await c.close()

    asyncio.run(go())
    assert node.wait_for(lambda: me.node_id not in node.connected(), 5)
    assert node.rejections(me.node_id)["no_pong"] == 1


def test_a_start_that_failed_is_tried_again_and_says_why_again() -> None:
    """`join` starts its network before the model loads and the run starts it again: a first
    start that failed (here: an address not on this machine) must not leave the second one
    returning as if it had started (issue 46: join.py reset a private field to get this)."""
    t = NetworkTransport(Identity.generate(), **{**FAST, "listen": "192.0.2.1:0"})
    for _ in range(2):
        with pytest.raises(OSError):
            t.start(timeout=10)
    t.close()


def test_a_start_that_timed_out_is_waited_for_again_not_taken_as_started() -> None:
    """The next start() after a timeout waits again: it raises while the network is still not
    up (join's early start swallows the first error; the run's start must not then report a
    network that never came up as started), and returns once it is."""
    t = NetworkTransport(Identity.generate(), **FAST)
    startup = t._startup
    go = asyncio.Event()

    async def slow_startup() -> None:
        await go.wait()
        await startup()

    t._startup = slow_startup
    try:
        for _ in range(2):
            with pytest.raises(RuntimeError, match="did not start in time"):
                t.start(timeout=0.2)
        assert t._loop is not None
        t._loop.call_soon_threadsafe(go.set)
        assert t.start(timeout=10) is t and t.port > 0
    finally:
        t.close()
