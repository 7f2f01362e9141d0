"""`--relay nats://HOST:4222` (or `tls://`): the room's sealed batches travel as NATS messages
through a NATS server or cluster (nats-py, the official client), on subjects derived from the
room's relay route id, sharded so a node's inbound stays under its budget (shards.py). What
arrives goes through the same Intake as websocket links: every check, limit and counted
rejection applies unchanged, charged to the route 'relay:<url>' when the signer is not provably
at fault. On top, per round: at most `budget_groups` messages verified and groups delivered; the
rest is shed after the seal check (counted). Before the seal, the junk gate (nats_gate.py): a
member's tagged message is always tried; untagged bytes (junk from anyone with publish rights on
the server) only while `junk_bytes_per_s` of junk holds; junk counts neither against the budget
nor in the rate the fan-in is planned from. The class's stats and end subjects: nats_class.py
(`classnet`, a part of the route).
Clients reconnect to another server of the cluster on their own.
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
import time
from collections.abc import Callable

from .batches import MAX_SEALED_BYTES
from .intake import Intake
from .nats_class import ClassSubjects
from .nats_gate import SEEN, SHED, TAG_OVERHEAD, TRY, JunkGate
from .nats_room import (
    ENV_PASSWORD,
    ENV_TOKEN,
    ENV_USER,
    nats_servers,
    tls_context,
)
from .protocol import ProtocolError
from .routes import relay_route
from .shards import (
    FanIn,
    RateEstimate,
    ShardPlanner,
    draw_subtrees,
    leaf_subject,
    subtree_subject,
)


class NatsRoute:
    """One room over NATS. Lives on the network loop: start(), publish(), round_done(), close()
    are called there (NetworkTransport schedules them); describe() and stats() from any thread.

    intake: the receiving side (shared with the websocket links). budget_groups: the most groups
    taken in per round. redraw_rounds: new subtrees every this many rounds. tick_s: how often the
    fan-in is re-planned from the measured rate."""

    def __init__(
        self,
        url: str,
        relay_id: str,
        intake: Intake,
        *,
        name: str = "",
        budget_groups: int = 128,
        redraw_rounds: int = 3,
        tick_s: float = 2.0,
        round_s: float = 60.0,
        start_fan: FanIn | None = None,
        reconnect_wait: float = 1.0,
        ping_interval: float = 10.0,
        connect_timeout: float = 5.0,
        pending_bytes: int = 64 << 20,
        junk_bytes_per_s: int = 16 << 20,
        log: Callable[[str], None] = print,
        rng: random.Random | None = None,
        nc=None,
    ) -> None:
        self.servers = nats_servers(url)
        self.key = relay_route(",".join(self.servers))
        self.relay_id, self.intake, self.name, self.log = relay_id, intake, name, log
        self.counters = intake.counters
        self.lock = intake.book.changed
        self.planner = ShardPlanner(budget_groups=budget_groups, redraw_rounds=redraw_rounds)
        self.planner.round_s = round_s
        if start_fan is not None:
            self.planner.fan = start_fan
        self.estimate = RateEstimate()
        self.tick_s, self.reconnect_wait = tick_s, reconnect_wait
        self.ping_interval, self.connect_timeout = ping_interval, connect_timeout
        self.pending_bytes = pending_bytes
        self.gate = JunkGate(lambda: intake.accepted()[0], junk_bytes_per_s)
        self.rng = rng or random.Random(os.urandom(16))
        self.nc = nc  # given: a connection shared by many simulated nodes (bench/scale.py)
        self.shared = nc is not None
        self.subs: list = []
        self.subjects: list[str] = []
        self.up = False
        self.server = ""  # the server this client is connected to now
        self.round_start = time.monotonic()
        self.opened = 0  # messages verified this round (within the budget)
        self.groups = 0  # groups delivered this round
        self.batches = 0  # batches delivered this round
        self.heard = 0  # messages that unsealed this round, verified or shed
        self.on_batch: Callable[[object, float], None] | None = None  # (batch, arrival time)
        self.classnet = ClassSubjects(  # the class's stats and end subjects
            relay_id,
            intake,
            self.gate,
            key=self.key,
            nc=lambda: self.nc,
            up=lambda: self.up,
            open_=self._open,
        )
        self._tasks: set[asyncio.Task] = set()
        self._connect_task: asyncio.Task | None = None
        self._closing = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Connect in the background (retrying with backoff): a node whose NATS server is
        down still starts, trains on LAN peers, and joins when the server comes up."""
        self._spawn(self._tick_loop())
        if self.shared:
            self._set_up(True)
            await self._subscribe(self.planner.fan)
            await self.classnet.subscribe()
            return
        self._connect_task = asyncio.get_running_loop().create_task(self._connect_loop())

    async def _connect_loop(self) -> None:
        import nats
        from nats.errors import Error as NatsError

        failures = 0
        while not self._closing:
            try:
                self.nc = await nats.connect(
                    self.servers,
                    name=self.name or None,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=self.reconnect_wait,
                    connect_timeout=self.connect_timeout,
                    ping_interval=self.ping_interval,
                    max_outstanding_pings=2,
                    no_echo=True,
                    tls=tls_context() if self.servers[0].lower().startswith("tls") else None,
                    user=os.environ.get(ENV_USER) or None,
                    password=os.environ.get(ENV_PASSWORD) or None,
                    token=os.environ.get(ENV_TOKEN) or None,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                )
            except (NatsError, OSError, TimeoutError, ssl.SSLError) as e:
                failures += 1
                with self.lock:
                    self.counters["nats_connect_failed"] += 1
                if failures == 1:
                    self.log(f"NATS {','.join(self.servers)}: cannot connect ({e!r}); retrying.")
                await asyncio.sleep(min(30.0, self.reconnect_wait * 2 ** min(failures, 5)))
                continue
            break
        if self._closing:
            return
        self._set_up(True)
        self.log(f"NATS: connected to {self.server}")
        await self._subscribe(self.planner.fan)
        await self.classnet.subscribe()

    async def close(self) -> None:
        self._closing = True
        for t in [self._connect_task, *self._tasks]:
            if t is not None:
                t.cancel()
        if self.nc is not None and not self.shared:
            try:
                await asyncio.wait_for(self.nc.close(), 5.0)
            except (TimeoutError, OSError, asyncio.CancelledError):
                pass
        self._set_up(False)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _set_up(self, up: bool) -> None:
        url = getattr(self.nc, "connected_url", None) if up else None
        with self.lock:
            self.up = up
            self.server = f"{url.hostname}:{url.port}" if url else ""
            self.lock.notify_all()

    async def _on_error(self, e: Exception) -> None:
        from nats.errors import SlowConsumerError

        key = "nats_slow_consumer" if isinstance(e, SlowConsumerError) else "nats_error"
        with self.lock:
            self.counters[key] += 1

    async def _on_disconnected(self) -> None:
        if not self._closing:
            with self.lock:
                self.counters["nats_disconnected"] += 1
            self._set_up(False)

    async def _on_reconnected(self) -> None:
        with self.lock:
            self.counters["nats_reconnected"] += 1
        self._set_up(True)
        self.log(f"NATS: reconnected to {self.server}")

    # ------------------------------------------------------------------ subscriptions
    async def _subscribe(self, fan: FanIn) -> None:
        """Listen to a fresh draw of `fan`'s subtrees (the old ones are dropped first: two
        overlapping subscriptions would deliver one message twice)."""
        nc = self.nc
        if nc is None or nc.is_closed:
            return
        for sub in self.subs:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - a closed/reconnecting client: the sub is gone
                pass
        self.subs = []
        subjects = [
            subtree_subject(self.relay_id, fan.depth, i) for i in draw_subtrees(fan, self.rng)
        ]
        per_sub = max(1, self.pending_bytes // len(subjects))
        for subject in subjects:
            self.subs.append(
                await nc.subscribe(
                    subject,
                    cb=self._on_msg,
                    # a burst of junk must not overflow the queue before it is tried (and
                    # dropped); memory is bounded by the bytes limit
                    pending_msgs_limit=max(4096, 4 * self.planner.budget_groups),
                    pending_bytes_limit=per_sub,
                )
            )
        if not self.shared:  # the server has our interest before anyone counts on it
            try:
                await nc.flush(timeout=5)
            except Exception:  # noqa: BLE001 - reconnecting: the client re-subscribes when back
                pass
        with self.lock:
            self.planner.fan, self.subjects = fan, subjects
            self.counters["nats_subscribed"] += 1
            self.lock.notify_all()

    @property
    def junk_bytes_per_s(self) -> int:
        return self.gate.junk_bytes_per_s

    @junk_bytes_per_s.setter
    def junk_bytes_per_s(self, value: int) -> None:
        self.gate.junk_bytes_per_s = value

    def _open(self, msg, max_bytes: int = MAX_SEALED_BYTES) -> bytes | None:
        """The envelope inside `msg` once the junk gate lets it be tried and it unseals; None
        (counted; what fails the seal is charged to the route) otherwise."""
        data = msg.data
        verdict = self.gate.verdict(msg.subject, data, msg.headers)
        if verdict in (SHED, SEEN):
            with self.lock:  # a junk flood this second, or a copy of an opened tag: unopened
                self.counters["nats_junk_shed" if verdict == SHED else "nats_tag_seen"] += 1
            return None
        try:
            if len(data) > max_bytes:
                raise ProtocolError("too_large", f"{len(data)} bytes, over {max_bytes}.")
            envelope = self.intake.unseal(data)
        except ProtocolError as e:
            self.gate.failed(data, verdict)
            with self.lock:
                self.counters["nats_junk"] += 1
            self.intake.reject_route(self.key, e.reason)
            return None
        if verdict == TRY:
            self.gate.opened(data)
        return envelope

    async def _on_msg(self, msg) -> None:
        """Only what unseals (a room member made it) counts: in the rate the fan-in is planned
        from, and against the round's budget of messages verified (over it, the rest is shed
        after the seal check, before any parsing or signature check). Junk (anyone with
        publish rights on the server can send it) is charged to the route and capped apart,
        by the junk gate, which never sheds a member's tagged message."""
        with self.lock:
            self.counters["nats_in_msgs"] += 1
            self.counters["nats_in_bytes"] += len(msg.data)
        envelope = self._open(msg)
        if envelope is None:
            return
        self.estimate.arrived()  # a member's message: it counts in the room's rate, shed or not
        with self.lock:
            self.heard += 1
            budget = self.planner.budget_groups
            if self.opened >= budget or self.groups >= budget:
                self.counters["nats_shed"] += 1  # this round's budget is spent: not verified
                return
            self.opened += 1
        got = self.intake.accept_unsealed(self.key, "relay", envelope)
        if got is not None and got is not True:
            with self.lock:
                self.groups += got.groups
                self.batches += 1
            if self.on_batch is not None:
                self.on_batch(got, time.time())

    async def _tick_loop(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            self.estimate.close(now, now - last, self.planner.fan.share)
            last = now
            want = self.planner.tick(self.estimate)
            if want != self.planner.fan and self.up:
                await self._subscribe(want)

    def round_done(self) -> None:
        """The trainer drained its inbox: a new round's budget; new subtrees when due."""
        now = time.monotonic()
        with self.lock:
            per_batch = self.groups / self.batches if self.batches else None
            heard = self.heard
            self.opened = self.groups = self.batches = self.heard = 0
        due = self.planner.round_done(now - self.round_start, per_batch, heard, self.estimate.seen)
        self.estimate.window_s = max(30.0, 3 * self.planner.round_s)  # ~3 rounds of arrivals
        self.round_start = now
        if due and self.up:
            self._spawn(self._subscribe(self.planner.fan))

    # ------------------------------------------------------------------ publishing
    def publish(self, sealed: bytes, subject: str | None = None) -> str | None:
        """Send one sealed batch to a uniformly drawn leaf, or to `subject` (buffered by the
        client while it reconnects; lost if it never does: NATS core is at most once). Returns
        the subject."""
        if len(sealed) > MAX_SEALED_BYTES:
            return None
        nc = self.nc
        if nc is None or nc.is_closed:
            with self.lock:
                self.counters["nats_publish_dropped"] += 1
            return None
        if len(sealed) + TAG_OVERHEAD > nc.max_payload:
            with self.lock:
                self.counters["publish_too_large"] += 1
            self.log(
                f"a batch of {len(sealed)} bytes is over the NATS server's max_payload "
                f"({nc.max_payload}); raise max_payload to 2MB in its config (packaging/nats/)."
            )
            return None
        subject = subject or leaf_subject(self.relay_id, self.rng)
        self._spawn(self._publish(nc, subject, sealed, self.gate.headers(subject, sealed)))
        return subject

    async def _publish(self, nc, subject: str, sealed: bytes, headers: dict[str, str]) -> None:
        from nats.errors import Error as NatsError

        try:
            await nc.publish(subject, sealed, headers=headers)
        except (NatsError, OSError) as e:
            with self.lock:
                self.counters["nats_publish_dropped"] += 1
            self.log(f"NATS: a batch was not sent ({e!r}).")
            return
        with self.lock:
            self.counters["nats_published"] += 1

    # ------------------------------------------------------------------ status
    def describe(self) -> str:
        with self.lock:
            fan, up, server = self.planner.fan, self.up, self.server
        share = "all" if fan.depth == 0 else f"{fan.k}/{16**fan.depth}"
        state = f"up ({server})" if up else "down"
        return f"NATS {state}, listening to {share} of the room"
