"""Each attack that once broke the swarm (issue 12), run again on loopback and shown to fail:
reflection/relaying of handshake proofs, the offline-guessing oracle, a hostile relay replaying
to get an honest node muted, outsiders at the relay, batch-id racing, peer-chosen bye reasons,
oversized handshakes, and display-name theft. Every loop is bounded in count and time."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import aiohttp
import pytest
from swarm_util import WAIT, RelayThread, batch_for, connect, envelope, keys_of, sealed

from sapo_edge.swarm import handshake as hs
from sapo_edge.swarm.batches import RolloutVerifier, make_rollouts, seal
from sapo_edge.swarm.handshake import KIND_MESSAGE, KIND_SEALED, Channel, HandshakeError
from sapo_edge.swarm.identity import Identity, name_for_id
from sapo_edge.swarm.peer import Closed, read_raw
from sapo_edge.swarm.peerbook import peer_name
from sapo_edge.swarm.protocol import (
    MAX_HANDSHAKE_BYTES,
    REASONS,
    ProtocolError,
    make_bye,
    make_hello,
    new_nonce,
    parse_message,
)
from sapo_edge.swarm.relay import Relay
from sapo_edge.swarm.roomkey import (
    SCRYPT_N,
    new_room_key,
    passphrase_key,
    room_keys,
)


@pytest.fixture
def relay_of():
    made = []

    def make(**limits):
        made.append(RelayThread(**limits))
        return made[-1]

    yield make
    for r in made:
        r.close()


def ws_url(node) -> str:
    return f"ws://127.0.0.1:{node.port}/ws"


# --- 1. impersonation by reflection / relaying proofs (three parties) -------------------------


class Mallory:
    """A man in the middle on loopback: A dials Mallory (as its --peer), Mallory dials B and
    relays the handshake, with its own ephemeral keys (`swap`) or byte for byte (`pipe`), then
    injects junk toward B. `keys` is what Mallory knows: None (an outsider) or the room's keys
    (a rogue member)."""

    def __init__(self, b_url: str, mode: str, keys=None) -> None:
        self.b_url, self.mode, self.keys = b_url, mode, keys
        self.seen: list[bytes] = []  # every frame that crossed Mallory
        self.outcome = ""
        self.done = asyncio.Event()

    async def serve(self, request):
        a = aiohttp.web.WebSocketResponse()
        await a.prepare(request)
        async with aiohttp.ClientSession() as s, s.ws_connect(self.b_url) as b:
            try:
                await (self._pipe(a, b) if self.mode == "pipe" else self._swap(a, b))
            except (HandshakeError, ConnectionError, RuntimeError) as e:
                self.outcome = f"failed: {e}"
        self.done.set()
        return a

    async def _next(self, ws) -> bytes:
        raw = await read_raw(ws, timeout=5)
        assert not isinstance(raw, Closed), raw
        self.seen.append(raw)
        return raw

    async def _pipe(self, a, b) -> None:
        """Forward A <-> B untouched (the handshake, then A's first batch), then inject junk."""
        await b.send_bytes(await self._next(a))  # hello A
        await a.send_bytes(await self._next(b))  # hello B
        await b.send_bytes(await self._next(a))  # auth A (encrypted)
        await a.send_bytes(await self._next(b))  # auth B (encrypted)
        await b.send_bytes(await self._next(a))  # A's batch (encrypted twice over)
        for _ in range(20):  # 20 junk frames: once enough to mute A at B for an hour
            await b.send_bytes(b"\x00" * 40)
        while not isinstance(await read_raw(b, timeout=5), Closed):
            pass  # until B hangs up
        self.outcome = "piped"

    async def _swap(self, a, b) -> None:
        """Replace both ephemeral keys with Mallory's, relay A's proof to B under new keys."""
        hello_a = await self._next(a)
        ha = parse_message(hello_a)
        eph_b = hs.X25519PrivateKey.generate()  # Mallory's key toward B
        pub = eph_b.public_key().public_bytes(hs.Encoding.Raw, hs.PublicFormat.Raw)
        to_b = json.loads(hello_a)
        to_b["ephemeral"] = pub.hex()  # claims A's identity, Mallory's DH key
        to_b = json.dumps(to_b, sort_keys=True, separators=(",", ":")).encode()
        await b.send_bytes(to_b)
        hello_b = await self._next(b)
        hb = parse_message(hello_b)
        eph_a = hs.X25519PrivateKey.generate()  # Mallory's key toward A
        to_a = json.loads(hello_b)
        to_a["ephemeral"] = (
            eph_a.public_key().public_bytes(hs.Encoding.Raw, hs.PublicFormat.Raw).hex()
        )
        to_a = json.dumps(to_a, sort_keys=True, separators=(",", ":")).encode()
        await a.send_bytes(to_a)
        auth_a = await self._next(a)
        psk = self.keys.link_psk if self.keys else b"guess"
        t_a = hs.transcript_hash(hello_a, to_a)
        t_b = hs.transcript_hash(to_b, hello_b)
        k_am = hs.session_keys(
            eph_a.exchange(hs.X25519PublicKey.from_public_bytes(ha.ephemeral)), psk, t_a
        )
        k_mb = hs.session_keys(
            eph_b.exchange(hs.X25519PublicKey.from_public_bytes(hb.ephemeral)), psk, t_b
        )
        try:  # a member can read A's auth and re-encrypt it for B; an outsider cannot
            _, plain = Channel(a, k_am[1], k_am[0]).open(auth_a)
            await Channel(b, k_mb[0], k_mb[1]).send(KIND_MESSAGE, plain)
        except hs.LinkBroken:
            await b.send_bytes(auth_a)  # forward it as is and hope
        raw = await read_raw(b, timeout=5)
        told = parse_message(raw) if isinstance(raw, bytes) else raw
        self.outcome = f"B said {getattr(told, 'reason', told)}"


def _mallory_site(m):
    """Serve m.serve on 127.0.0.1:PORT/ws from its own thread; returns (port, stop, loop)."""
    import threading

    loop = asyncio.new_event_loop()
    ready, box = threading.Event(), {}

    async def start() -> None:
        app = aiohttp.web.Application()
        app.router.add_get("/ws", m.serve)
        box["runner"] = runner = aiohttp.web.AppRunner(app, access_log=None)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["port"] = site._server.sockets[0].getsockname()[1]

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    t = threading.Thread(target=main, daemon=True)
    t.start()
    ready.wait(10)

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)

    return box["port"], stop, loop


@pytest.mark.parametrize("insider", [False, True], ids=["outsider", "rogue-member"])
def test_a_man_in_the_middle_cannot_pass_off_a_proof_as_his_own(nodes, insider) -> None:
    code = new_room_key()
    keys = keys_of("lab", code)
    b = nodes(room="lab", secret=code, reconnect_base=5, reconnect_max=5)
    m = Mallory(ws_url(b), "swap", keys if insider else None)
    port, stop, loop = _mallory_site(m)
    try:
        a = nodes(room="lab", secret=code, peers=[f"127.0.0.1:{port}"], reconnect_base=5)
        assert (
            asyncio.run_coroutine_threadsafe(asyncio.wait_for(m.done.wait(), 10), loop).result(15)
            is True
        )
        want = "bad_signature" if insider else "wrong_secret"
        assert m.outcome == f"B said {want}", m.outcome
        assert b.wait_for(lambda: b.rejections("ip:127.0.0.1")[want] >= 1, WAIT)
        assert a.ident.node_id not in b.connected()  # B never took Mallory for A
        assert b.rejections(a.ident.node_id) == {} and not any(p.muted for p in b.peers())
    finally:
        stop()


def test_relaying_a_whole_session_reads_nothing_and_junk_mutes_nobody(nodes) -> None:
    code = new_room_key()
    b = nodes(room="lab", secret=code, reject_threshold=5)
    m = Mallory(ws_url(b), "pipe")
    port, stop, loop = _mallory_site(m)
    try:
        a = nodes(room="lab", secret=code, peers=[f"127.0.0.1:{port}"], reconnect_base=5)
        assert a.wait_for(lambda: len(a.connected()) == 1, WAIT)  # the real A-B session, piped
        a.publish(batch_for(a.ident, 1))
        assert asyncio.run_coroutine_threadsafe(asyncio.wait_for(m.done.wait(), 15), loop).result(
            20
        )
        # the junk did not decrypt: the link was dropped and the address charged, never A
        assert b.wait_for(lambda: b.rejections("ip:127.0.0.1")["bad_frame"] >= 1, WAIT)
        assert b.rejections(a.ident.node_id) == {}
        assert not any(p.muted for p in b.peers())
        # Mallory saw ciphertext only: no question, answer or name crossed in the clear
        blob = b"".join(f if isinstance(f, bytes) else f.encode() for f in m.seen)
        assert b"What is" not in blob and b"<answer>" not in blob
        assert a.name.encode() not in blob and b"tiny" not in blob
    finally:
        stop()


# --- 2. the offline-guessing oracle is gone ---------------------------------------------------


def test_a_stranger_who_connects_gets_nothing_that_depends_on_the_room_key(nodes) -> None:
    code = new_room_key()
    node = nodes(room="lab", secret=code, model="secret-model-name")
    keys = keys_of("lab", code)
    me = Identity.generate()

    async def go() -> list[bytes]:
        got = []
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url(node)) as ws:
            eph = hs.X25519PrivateKey.generate()
            pub = eph.public_key().public_bytes(hs.Encoding.Raw, hs.PublicFormat.Raw)
            await ws.send_bytes(make_hello(me, keys.lan_id, new_nonce(), pub))  # the lan id
            got.append(await read_raw(ws, timeout=5))  # (is public on mDNS)
            await ws.send_bytes(b"\x01" * 80)  # an auth it cannot make without the key
            while not isinstance(raw := await read_raw(ws, timeout=5), Closed):
                got.append(raw)
        return got

    frames = asyncio.run(go())
    hello, *rest = frames
    assert set(json.loads(hello)) == {
        "type",
        "version",
        "role",
        "node_id",
        "public_key",
        "room",
        "nonce",
        "ephemeral",
    }  # no name, no model: those come only inside the authenticated link
    assert b"secret-model-name" not in hello and node.name.encode() not in hello
    assert [parse_message(f).reason for f in rest] == ["wrong_secret"]  # a bye, no proof
    assert node.wait_for(lambda: node.rejections("ip:127.0.0.1") == {"wrong_secret": 1}, WAIT)


def test_room_ids_reveal_nothing_of_the_name_and_passphrases_cost_scrypt(monkeypatch) -> None:
    code = new_room_key()
    # a room key is the room: its ids do not depend on the name at all, so they cannot be
    # searched back to it (the old lan hash fell to 744 guesses of the name)
    assert room_keys("lab", code).lan_id == room_keys("anything", code).lan_id
    assert room_keys("lab", code).lan_id != room_keys("lab", new_room_key()).lan_id
    assert room_keys("lab", code).relay_id != room_keys("lab", code).lan_id
    # a typed passphrase goes through scrypt (32 MiB, 2^15): every offline guess costs that
    calls = []
    real = hashlib.scrypt
    monkeypatch.setattr(hashlib, "scrypt", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    passphrase_key.cache_clear()
    keys = room_keys("lab", "correct horse battery staple")
    assert calls and calls[0]["n"] == SCRYPT_N >= 1 << 15 and calls[0]["r"] == 8
    assert keys.kind == "passphrase" and room_keys("lab", "").kind == "open"


# --- 4. a hostile relay replaying genuine batches gets nobody muted ---------------------------


class ReplayingRelay(Relay):
    """Forwards every sealed batch three times, bypassing its own replay cache."""

    def _check(self, client, sealed_box):
        return None

    async def _forward(self, client, sealed_box) -> None:
        for _ in range(3):
            await super()._forward(client, sealed_box)


def test_relay_replays_delays_and_stale_batches_are_charged_to_the_relay(relay_of, nodes) -> None:
    r = relay_of()
    r.relay.__class__ = ReplayingRelay
    b = nodes(relay=r.url, reject_threshold=5, stale_rounds=2)
    route = f"relay:{r.url}"
    a = Identity.generate()
    # b must be at the relay before a sends: the relay keeps nothing for later
    assert b.wait_for(lambda: route in b.connected(), 30)

    async def go() -> None:
        c = await connect(r.url, a, relay=True)
        try:
            for i in range(4):  # 4 genuine batches (5 with the last), each arriving 3 times
                await c.send_sealed(sealed(a, round_=20, start=10 * i))
            await c.send_sealed(sealed(a, round_=20, start=90, sent_at=time.time() - 3600))
            await c.send_sealed(sealed(a, round_=3, start=95))  # far behind round 20
            assert await asyncio.to_thread(
                b.wait_for, lambda: b.rejections(route)["stale_round"] >= 3, 30
            )  # 30 s at most: a loaded 2-core machine takes seconds for this
            await c.send_sealed(sealed(a, round_=21, start=99))  # a's next batch still counts
            assert await asyncio.to_thread(b.wait_for, lambda: b.counters["delivered"] == 5, 30)
        finally:
            await c.close()

    asyncio.run(go())
    assert b.wait_for(lambda: b.rejections(route)["replay"] == 10, 30)
    got = b.rejections(route)
    assert got["expired"] == 3 and got["stale_round"] == 3
    assert b.rejections(a.node_id) == {}  # nothing is held against the signer
    assert not any(p.muted for p in b.peers())
    assert [s for s, _ in b.receive()] == [a.node_id] * 5


def test_a_relay_that_delays_and_bunches_genuine_batches_gets_nobody_muted(relay_of, nodes) -> None:
    """A relay holds 80 of a's genuine batches, signed over 160 s (30 a minute, half the
    receiver's 60), and releases them at once. Rated by arrival, 20 were refused as
    rate_limited, charged to a, and a was muted; through a relay the rate is now by the signed
    sent_at, which the relay cannot move. A member that signs a flood is still refused past its
    rate; the refusals are charged to the route (issue 44: once `seen` forgot a genuine message,
    a resent copy would count twice against its signer), so nobody is muted."""
    r = relay_of()
    b = nodes(relay=r.url, reject_threshold=5)
    route = f"relay:{r.url}"
    a, flooder = Identity.generate(), Identity.generate()
    assert b.wait_for(lambda: route in b.connected(), 30)
    now = time.time()

    async def go() -> None:
        c = await connect(r.url, a, relay=True)
        try:
            for i in range(80):  # what the relay held back, released in one burst
                sent_at = now - 160 + 2 * i
                await c.send_sealed(sealed(a, round_=20, start=10 * i, sent_at=sent_at))
            assert await asyncio.to_thread(b.wait_for, lambda: b.counters["delivered"] == 80, 30)
            assert b.rejections(a.node_id) == {} and b.rejections(route)["rate_limited"] == 0
        finally:
            await c.close()
        f = await connect(r.url, flooder, relay=True)
        try:
            for i in range(70):  # signed within a second: over 60 a minute by its signatures
                await f.send_sealed(sealed(flooder, round_=20, start=10 * i))
            assert await asyncio.to_thread(
                b.wait_for, lambda: b.rejections(route)["rate_limited"] >= 5, 30
            )
        finally:
            await f.close()

    asyncio.run(go())
    assert b.counters["delivered"] <= 80 + 60  # the flood past its signed rate was refused
    assert b.rejections(a.node_id) == {} and b.rejections(flooder.node_id) == {}
    assert not any(p.muted for p in b.peers())


def test_the_signed_rate_holds_in_every_minute_whatever_the_order_of_arrival() -> None:
    import random

    from sapo_edge.swarm.signed_rate import SignedWindow

    times = [1000.0 + i for i in range(120)]  # one a second: 60 in any minute
    random.Random(4).shuffle(times)
    w = SignedWindow(keep_s=360.0)
    assert all(w.admit(t, 1100.0, 60) for t in times)
    assert not w.admit(1059.5, 1100.0, 60)  # a 61st in [1000, 1060)
    assert not w.admit(1119.5, 1100.0, 60)  # and one in [1060, 1120)
    assert w.admit(1200.0, 1100.0, 60)  # a minute with room
    assert w.admit(1650.0, 1700.0, 60) and w.times == [1650.0]  # older than keep_s: forgotten


# --- 7. batch ids cannot be burned by another member -------------------------------------------


def test_a_member_racing_another_members_batch_id_does_not_drop_it(nodes) -> None:
    node = nodes()
    honest, racer = Identity.generate(), Identity.generate()
    batch_id = "ab" * 16

    async def go() -> None:
        c1 = await connect(ws_url(node), racer)
        c2 = await connect(ws_url(node), honest)
        try:
            await c1.send_sealed(sealed(racer, batch_id=batch_id))  # first, with the same id
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.counters["delivered"] == 1, WAIT
            )
            await c2.send_sealed(sealed(honest, batch_id=batch_id))
            assert await asyncio.to_thread(
                node.wait_for, lambda: node.counters["delivered"] == 2, WAIT
            )
        finally:
            await c1.close()
            await c2.close()

    asyncio.run(go())
    assert sorted(s for s, _ in node.receive()) == sorted([racer.node_id, honest.node_id])
    assert node.counters["duplicate"] == 0


# --- 8. handshake messages are capped before parsing -------------------------------------------


def test_huge_handshakes_are_cut_unparsed_while_an_honest_peer_joins(nodes, monkeypatch) -> None:
    parsed: list[int] = []
    real = hs.parse_message
    monkeypatch.setattr(hs, "parse_message", lambda d, m=0: parsed.append(len(d)) or real(d, m))
    node = nodes()
    me = Identity.generate()
    hello = make_hello(me, keys_of().lan_id, new_nonce(), b"\x02" * 32)
    big = hello[:-1] + b',"pad":"' + b"x" * (1 << 20) + b'"}'

    async def attack(n: int) -> int:
        cut = 0
        async with aiohttp.ClientSession() as s:
            for _ in range(n):
                async with s.ws_connect(ws_url(node)) as ws:
                    try:
                        await ws.send_bytes(big)
                    except (ConnectionError, aiohttp.ClientError):
                        pass
                    cut += isinstance(await read_raw(ws, timeout=5), Closed)
        return cut

    async def go() -> tuple[int, bool]:
        flood = asyncio.ensure_future(attack(42))
        honest = await connect(ws_url(node), Identity.generate())  # joins meanwhile
        ok = await asyncio.to_thread(node.wait_for, lambda: len(node.connected()) == 1, WAIT)
        await honest.close()
        return await flood, ok

    cut, ok = asyncio.run(go())
    assert cut == 42 and ok
    assert node.guard.counters["too_large"] >= 42  # cut at the TCP level, before the websocket
    assert parsed and max(parsed) <= MAX_HANDSHAKE_BYTES  # nothing big ever reached the parser


# --- 10. an outsider at the relay reads nothing and injects nothing ----------------------------


def test_an_outsider_at_the_relay_reads_and_injects_nothing(relay_of, nodes) -> None:
    # the hand-driven clients answer the relay's pings only while they read: at a 0.5 s
    # heartbeat a loaded machine had the relay drop the spy before its junk was sent
    r = relay_of(heartbeat=30.0)
    code = new_room_key()
    keys = keys_of("lab", code)
    a = nodes(room="lab", secret=code, relay=r.url)
    b = nodes(room="lab", secret=code, relay=r.url)
    route = f"relay:{r.url}"
    for n in (a, b):
        assert n.wait_for(lambda n=n: n.connected() == [route], WAIT)
    stranger = dict(keys_of("lab", new_room_key()).__dict__)  # keys of no use here

    async def go() -> None:
        # what a LAN outsider knows (the lan id on mDNS) is not the relay route: an empty room
        lurker_id = Identity.generate()
        lurker = await connect(r.url, lurker_id, _keys(stranger, relay_id=keys.lan_id), relay=True)
        # worst case, the outsider learned the real route: it gets sealed boxes and no key
        spy = await connect(
            r.url, Identity.generate(), _keys(stranger, relay_id=keys.relay_id), relay=True
        )
        try:
            a.publish(batch_for(a.ident, 1))
            assert await asyncio.to_thread(b.wait_for, lambda: b.counters["delivered"] == 1, WAIT)
            kind, box = await spy.recv()
            assert (
                kind == KIND_SEALED
                and b"What is" not in box
                and a.ident.node_id.encode() not in box
            )
            with pytest.raises(ProtocolError):  # opening it needs the room key
                RolloutVerifier(keys_of("lab", "a guessed passphrase")).open(box)
            await spy.send_sealed(sealed(Identity.generate(), keys_of("lab", new_room_key())))
            assert await asyncio.to_thread(
                b.wait_for, lambda: b.rejections(route)["wrong_secret"] == 1, WAIT
            )
            assert set(r.relay.rooms[keys.lan_id]) == {lurker_id.node_id}  # alone in there
            assert await lurker.recv(timeout=0.5) == Closed("timeout")  # it heard nothing
        finally:
            await lurker.close()
            await spy.close()

    asyncio.run(go())
    assert [s for s, _ in b.receive()] == [a.ident.node_id]  # only the member's batch arrived
    assert r.relay.stats()["rooms"] >= 1


def _keys(base: dict, **over):
    from sapo_edge.swarm.roomkey import RoomKeys

    return RoomKeys(**{**base, **over})


# --- 12. peer-chosen bye reasons never become new counter keys ---------------------------------


def test_bye_reasons_come_from_a_fixed_set(nodes, relay_of) -> None:
    node = nodes()
    r = relay_of()
    me = Identity.generate()

    async def one(url: str, i: int) -> bool:
        """One bye with a made-up reason; False when the other side hung up first (its
        handshake deadline can pass on a loaded machine): the caller tries again."""
        async with aiohttp.ClientSession() as s, s.ws_connect(url) as ws:
            eph = hs.X25519PrivateKey.generate().public_key()
            pub = eph.public_bytes(hs.Encoding.Raw, hs.PublicFormat.Raw)
            await ws.send_bytes(make_hello(me, keys_of().lan_id, new_nonce(), pub))
            await read_raw(ws, timeout=WAIT)
            bye = json.dumps({"type": "bye", "reason": f"r{i}", "message": "x"}).encode()
            try:
                await ws.send_bytes(bye)
            except aiohttp.ClientConnectionResetError:
                return False
            await read_raw(ws, timeout=WAIT)
            return True

    async def go() -> None:
        for i in range(150):
            for url in (ws_url(node), f"{r.url}/ws"):
                for _try in range(5):
                    if await one(url, i):
                        break

    asyncio.run(go())
    assert node.wait_for(lambda: node.rejections("ip:127.0.0.1")["other"] == 150, WAIT)
    keys = {k.split(":", 1)[1] for k in node.counters if k.startswith("rejected:")}
    assert keys <= REASONS and len(keys) <= 2
    assert set(r.relay.stats()["rejected"]) <= REASONS
    assert make_bye("no-such-reason", "x") == make_bye("other", "x")


# --- low: display names ----------------------------------------------------------------------


def test_peers_cannot_take_another_nodes_name(nodes) -> None:
    victim = Identity.generate()
    thief = Identity.generate()
    # a derived name ("swift-otter-3f2a") that is not the announcer's own is replaced by its own
    assert peer_name(victim.name, thief.node_id) == name_for_id(thief.node_id)
    assert peer_name(victim.name, victim.node_id) == victim.name
    assert peer_name("\x1b]52;c;aGk=\x07lab-laptop", thief.node_id) == "]52;c;aGk=lab-laptop"
    # two peers announcing one name (or ours) are both told apart by their ids
    node = nodes(name="teacher")
    a = nodes(name="teacher", peers=[f"127.0.0.1:{node.port}"])
    b = nodes(name="anna", peers=[f"127.0.0.1:{node.port}"])
    c = nodes(name="anna", peers=[f"127.0.0.1:{node.port}"])
    assert node.wait_for(lambda: len(node.connected()) == 3, WAIT)
    shown = {p.node_id: p.name for p in node.peers()}
    assert shown[a.ident.node_id] == f"teacher#{a.ident.node_id[:6]}"
    assert shown[b.ident.node_id] == f"anna#{b.ident.node_id[:6]}"
    assert shown[c.ident.node_id] == f"anna#{c.ident.node_id[:6]}"
    assert len(set(shown.values())) == 3


def test_an_open_room_says_so(nodes) -> None:
    logs: list[str] = []
    nodes(log=logs.append)
    assert any("is open: anyone who knows its name can join" in m for m in logs)
    logs.clear()
    nodes(secret=new_room_key(), log=logs.append)
    assert not any("is open" in m for m in logs)


def test_sealed_batches_open_only_with_the_room_key() -> None:
    keys = keys_of("lab", new_room_key())
    me = Identity.generate()
    env, _ = make_rollouts(me, keys, batch_for(me), 1)
    box = seal(keys, env)
    assert RolloutVerifier(keys).open(box).sender == me.node_id
    assert env not in box and b"What is" not in box
    for other in (keys_of("lab", new_room_key()), keys_of("lab", "guess"), keys_of("lab")):
        with pytest.raises(ProtocolError) as e:
            RolloutVerifier(other).open(box)
        assert e.value.reason == "wrong_secret"
    assert envelope(me, keys) != envelope(me, keys)  # fresh ids: no two batches alike


def test_a_listener_answering_a_dial_with_a_huge_hello_is_refused_unparsed(nodes, monkeypatch):
    """The dialing side too refuses an oversized hello before parsing it."""
    parsed: list[int] = []
    real = hs.parse_message
    monkeypatch.setattr(hs, "parse_message", lambda d, m=0: parsed.append(len(d)) or real(d, m))

    class Bloated:
        async def serve(self, request):
            ws = aiohttp.web.WebSocketResponse(max_msg_size=4 << 20)
            await ws.prepare(request)
            await read_raw(ws, timeout=5)  # the dialer's hello
            await ws.send_bytes(b'{"type":"hello","pad":"' + b"x" * (1 << 20) + b'"}')
            await read_raw(ws, timeout=5)
            return ws

    fake = Bloated()
    port, stop, _loop = _mallory_site(fake)  # serves any object's .serve on /ws
    try:
        a = nodes(peers=[f"127.0.0.1:{port}"], reconnect_base=5, reconnect_max=5)
        assert a.wait_for(lambda: a.rejections("ip:127.0.0.1")["too_large"] >= 1, WAIT)
        assert a.connected() == [] and all(n <= MAX_HANDSHAKE_BYTES for n in parsed)
    finally:
        stop()
