"""Model-free simulated nodes for the scale harness (bench/scale.py) and the 1,000-node test:
each has its own identity, signs and seals realistic rollout batches, and takes in what arrives
through the real receiving path (swarm/intake.py: open, verify, replay cache, limits, counted
rejections) over the real NATS route (swarm/nats_transport.py: shards, budget) or a real
websocket link to `sapo-edge relay` (the real handshake). Many of them share one asyncio loop.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from sapo_edge.data.rollout import RolloutGroup, encode_batch
from sapo_edge.data.tasks import TaskRef
from sapo_edge.swarm.batches import make_rollouts, seal
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.intake import Intake
from sapo_edge.swarm.nats_transport import NatsRoute
from sapo_edge.swarm.peerbook import PeerBook
from sapo_edge.swarm.roomkey import RoomKeys

_WORDS = (
    "the of and to in is that it for as with on be by this are from at an which we have not "
    "can so if then add sum carry digit result step first next number value total each two "
    "three four five six seven eight nine ten let compute answer check because therefore"
).split()


@dataclass(frozen=True)
class Shape:
    """What one node publishes per round: `groups` groups of `completions` completions of about
    `chars` characters (the paper's 8 x 8; 256 tokens is ~900 characters of English)."""

    groups: int = 8
    completions: int = 8
    chars: int = 900
    question_chars: int = 300


def _text(rng: random.Random, n: int) -> str:
    out, size = [], 0
    while size < n:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def make_batch(ident: Identity, round_: int, shape: Shape, rng: random.Random) -> bytes:
    groups = []
    for i in range(shape.groups):
        answer = str(rng.randrange(100))
        groups.append(
            RolloutGroup(
                task_ref=TaskRef.make(
                    "basic_arithmetic", {"min_terms": 2}, seed=rng.randrange(1 << 30), index=i
                ),
                question=_text(rng, shape.question_chars),
                reference_answer=answer,
                completions=tuple(
                    _text(rng, shape.chars) + f" <answer>{answer if j % 2 else 0}</answer>"
                    for j in range(shape.completions)
                ),
                rewards=tuple(float(j % 2) for j in range(shape.completions)),
                producer=ident.node_id,
                model="Qwen/Qwen2.5-0.5B-Instruct",
                round=round_,
                created_at=time.time(),
            )
        )
    return encode_batch(groups)


@dataclass
class RoundStats:
    """One node's round: what reached it and what checking it cost."""

    in_msgs: int = 0
    in_bytes: int = 0
    groups: int = 0
    batches: int = 0
    shed: int = 0
    cpu_ns: int = 0
    arrivals: list = field(default_factory=list)  # (batch id, arrival unix time)


class SimNode:
    """One simulated member: identity, peer book, Intake, and a route (NATS or websocket)."""

    def __init__(self, keys: RoomKeys, shape: Shape, seed: int) -> None:
        self.ident = Identity.generate()
        self.keys, self.shape = keys, shape
        self.rng = random.Random(seed)
        self.book = PeerBook(
            threading.Condition(threading.RLock()),
            Counter(),
            reject_threshold=1000,
            reject_window=60.0,
            mute_base=30.0,
            max_tracked=8192,
            log=lambda _m: None,
        )
        self.intake = Intake(
            self.ident.node_id,
            keys,
            self.book,
            inbox_limit=100_000,
            inbox_bytes=1 << 30,
            max_batches_per_minute=100_000,
        )
        self.counters = self.book.counters
        self.stats = RoundStats()
        accept = self.intake.accept_verified

        def timed(route: str, via: str, data: bytes):  # CPU time of the real checks
            t0 = time.thread_time_ns()
            try:
                return accept(route, via, data)
            finally:
                self.stats.cpu_ns += time.thread_time_ns() - t0

        self.intake.accept_verified = timed  # type: ignore[method-assign]

    def sealed_batch(self, round_: int) -> tuple[bytes, str]:
        payload = make_batch(self.ident, round_, self.shape, self.rng)
        msg, batch_id = make_rollouts(self.ident, self.keys, payload, round_)
        return seal(self.keys, msg), batch_id

    def take_round(self) -> RoundStats:
        """This round's stats (and a fresh set for the next); drains the inbox like a trainer."""
        self.intake.drain()
        st, self.stats = self.stats, RoundStats()
        return st


class NatsSimNode(SimNode):
    def __init__(self, keys: RoomKeys, shape: Shape, seed: int, nc, **route_kw) -> None:
        super().__init__(keys, shape, seed)
        self.route = NatsRoute(
            "nats://shared:4222", keys.relay_id, self.intake, nc=nc, log=lambda _m: None, **route_kw
        )
        self.route.on_batch = self._delivered
        orig = self.route._on_msg

        async def on_msg(msg) -> None:
            self.stats.in_msgs += 1
            self.stats.in_bytes += len(msg.data)
            shed = self.counters["nats_shed"]
            await orig(msg)
            self.stats.shed += self.counters["nats_shed"] - shed

        self.route._on_msg = on_msg  # type: ignore[method-assign]

    def _delivered(self, batch, t: float) -> None:
        self.stats.groups += batch.groups
        self.stats.batches += 1
        self.stats.arrivals.append((batch.batch_id, t))

    async def start(self) -> None:
        await self.route.start()

    def publish(self, round_: int) -> tuple[str, str | None, float]:
        sealed, batch_id = self.sealed_batch(round_)
        t = time.time()
        return batch_id, self.route.publish(sealed), t

    def end_round(self) -> RoundStats:
        st = self.take_round()
        self.route.round_done()
        return st

    async def close(self) -> None:
        await self.route.close()


class WsSimNode(SimNode):
    """A member on the websocket relay: the real handshake, then sealed frames both ways."""

    def __init__(self, keys: RoomKeys, shape: Shape, seed: int, url: str) -> None:
        super().__init__(keys, shape, seed)
        self.url, self.route_key = url, f"relay:{url}"
        self.session = self.ws = self.http = None
        self.reader: asyncio.Task | None = None

    async def start(self) -> None:
        import aiohttp

        from sapo_edge.swarm.handshake import handshake
        from sapo_edge.swarm.peer import MAX_FRAME_BYTES

        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(
            self.url.rstrip("/") + "/ws", max_msg_size=MAX_FRAME_BYTES, compress=0
        )
        self.session = await handshake(
            self.ws,
            self.ident,
            self.keys.relay_id,
            b"",
            initiator=True,
            timeout=30.0,
            expect_role="relay",
        )
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        from sapo_edge.swarm.handshake import KIND_SEALED, LinkBroken
        from sapo_edge.swarm.peer import Closed, read_raw

        while True:
            raw = await read_raw(self.ws)
            if isinstance(raw, Closed):
                self.counters["ws_closed"] += 1
                return
            if isinstance(raw, str):
                continue
            self.stats.in_msgs += 1
            self.stats.in_bytes += len(raw)
            try:
                kind, data = self.session.channel.open(raw)
            except LinkBroken:
                self.counters["ws_bad_frame"] += 1
                return
            if kind != KIND_SEALED:
                continue
            got = self.intake.accept_verified(self.route_key, "relay", data)
            if got is not None and got is not True:
                self.stats.groups += got.groups
                self.stats.batches += 1
                self.stats.arrivals.append((got.batch_id, time.time()))

    async def publish(self, round_: int) -> tuple[str, None, float]:
        from sapo_edge.swarm.handshake import KIND_SEALED

        sealed, batch_id = self.sealed_batch(round_)
        t = time.time()
        try:
            await self.session.channel.send(KIND_SEALED, sealed)
        except (ConnectionError, RuntimeError):  # the relay dropped us (e.g. a late pong)
            self.counters["ws_dropped"] += 1
        return batch_id, None, t

    def end_round(self) -> RoundStats:
        return self.take_round()

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.http is not None:
            await self.http.close()


def leaf_matches(leaf: str, subject: str) -> bool:
    """Whether a NATS subscription subject (tokens, '*' and a final '>') matches a leaf."""
    lt, st = leaf.split("."), subject.split(".")
    for i, tok in enumerate(st):
        if tok == ">":
            return len(lt) > i
        if i >= len(lt) or (tok != "*" and tok != lt[i]):
            return False
    return len(lt) == len(st)
