"""NetworkTransport: the real swarm. Publishing and receiving: batches are signed, sealed for
the room and queued to every link; sealed batches that arrive are opened, verified, charged to
whoever is provably at fault (the signer, or else the route) and handed to the trainer through a
byte-bounded, fair inbox. publish() and receive() never wait for the network. The links
themselves are in links.py (listening), dialing.py (dialing) and link_life.py (one link).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable

from aiohttp import web

from ..data.rollout import RolloutError, groups_of
from .admission import Admissions, serve_admission
from .batches import make_rollouts, seal
from .guard import GuardLimits
from .handshake import KIND_SEALED
from .identity import Identity
from .intake import Intake
from .link_life import Link
from .links import LinkLayer
from .nats_room import is_nats_url
from .nats_transport import NatsRoute
from .peers import PeerInfo
from .protocol import MAX_MESSAGE_BYTES
from .roomkey import RoomKeys, describe_room, room_keys
from .stats_channel import StatsChannel


class NetworkTransport(StatsChannel, LinkLayer):
    """Transport over websockets; see the module docstring. Call start() before use, close() after.

    room/secret: the room's name and credential (a `sapo1-` room key, a passphrase, or "" for an
    open room); see roomkey.py. admissions: hand this room's key to people who type a short code
    (served at /admit; see admission.py).
    """

    def __init__(
        self,
        identity: Identity,
        *,
        room: str = "default",
        secret: str = "",
        keys: RoomKeys | None = None,
        listen: str = "0.0.0.0:7744",
        peers: list[str] | tuple[str, ...] = (),
        relay: str = "",
        mdns: bool = True,
        mdns_interfaces: list[str] | None = None,
        model: str = "",
        backend: str = "",
        name: str | None = None,
        heartbeat: float = 10.0,
        handshake_timeout: float = 10.0,
        queue_limit: int = 64,
        inbox_limit: int = 1024,
        inbox_bytes: int = 64 << 20,
        reconnect_base: float = 1.0,
        reconnect_max: float = 60.0,
        reject_threshold: int = 20,
        reject_window: float = 60.0,
        mute_base: float = 30.0,
        window_s: float = 300.0,
        stale_rounds: int = 10,
        max_batches_per_minute: int = 60,
        max_tracked: int = 4096,
        guard: GuardLimits | None = None,
        admissions: Admissions | None = None,
        max_inbound_groups: int = 128,
        nats_options: dict | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        keys = keys or room_keys(room, secret)
        super().__init__(
            identity,
            keys,
            listen=listen,
            peers=peers,
            relay=relay,
            mdns=mdns,
            mdns_interfaces=mdns_interfaces,
            model=model,
            backend=backend,
            name=name,
            heartbeat=heartbeat,
            handshake_timeout=handshake_timeout,
            queue_limit=queue_limit,
            reconnect_base=reconnect_base,
            reconnect_max=reconnect_max,
            reject_threshold=reject_threshold,
            reject_window=reject_window,
            mute_base=mute_base,
            max_tracked=max_tracked,
            guard=guard,
            log=log,
        )
        self.room = keys.lan_id
        self.admissions = admissions
        self.intake = Intake(
            identity.node_id,
            keys,
            self.book,
            window_s=window_s,
            stale_rounds=stale_rounds,
            inbox_limit=inbox_limit,
            inbox_bytes=inbox_bytes,
            max_batches_per_minute=max_batches_per_minute,
            notify=self._notify,
        )
        self.verifier, self.inbox = self.intake.verifier, self.intake.inbox
        self._sent_times: deque[float] = deque()  # when recent batches were published (pacing)
        self._paced_said = -1e9
        # members' per-round stats (publish_stats, on_stats) come in through the intake too
        self.nats: NatsRoute | None = None
        if is_nats_url(relay):  # the room over a NATS server or cluster, sharded
            self.nats = NatsRoute(
                relay,
                keys.relay_id,
                self.intake,
                name=self.name,
                budget_groups=max_inbound_groups,
                log=log,
                **(nats_options or {}),
            )
        if keys.is_open:
            log(describe_room(keys))

    # ----------------------------------------------------------------- public (any thread)
    def publish(self, payload: bytes) -> None:
        """Sign `payload` (an encoded batch of this node's groups: encode_batch's Batch, whose
        groups are read without parsing it again), seal it for the room and queue it for every
        link."""
        try:
            groups = groups_of(payload)
        except RolloutError as e:
            self.log(f"not publishing a batch this node would reject itself: {e}")
            return
        if not groups:
            return
        if any(g.producer != self.ident.node_id for g in groups):
            self.log(
                "not publishing: groups must name this node's id as producer (peers refuse others)."
            )
            return
        if not self._pace():
            return
        msg, batch_id = make_rollouts(self.ident, self.keys, payload, max(g.round for g in groups))
        if len(msg) > MAX_MESSAGE_BYTES:
            with self._lock:
                self.counters["publish_too_large"] += 1
            self.log(f"a batch of {len(msg)} bytes is over the 1 MiB message limit; not sent.")
            return
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._broadcast, seal(self.keys, msg), batch_id)

    def _pace(self) -> bool:
        """Stay under the batches per minute that peers accept (theirs default to ours): a batch
        over it is not sent (counted, said once a minute) rather than refused and counted
        against this node by every peer, which would end in a mute. The minute's budget is
        spread: at most a sixth of it (rounded up) in any 10 s, so a node whose rounds take
        milliseconds (a tiny model) does not spend the whole minute in its first seconds,
        before its peers are even connected, and then fall silent."""
        now = time.monotonic()
        per_minute = self.intake.max_batches_per_minute
        with self._lock:
            sent = self._sent_times
            while sent and sent[0] < now - 60.0:
                sent.popleft()
            recent = sum(1 for t in sent if t >= now - 10.0)
            if len(sent) < per_minute and recent < -(-per_minute // 6):
                sent.append(now)
                return True
            self.counters["publish_paced"] += 1
            say = now - self._paced_said >= 60.0
            if say:
                self._paced_said = now
        if say:
            self.log(
                f"publishing faster than the {self.intake.max_batches_per_minute} batches a "
                "minute peers accept: extra batches are not sent (training goes on)"
            )
        return False

    def receive(self) -> list[tuple[str, bytes]]:
        """What arrived since the last call; one call per round (the NATS budget's clock)."""
        if self.nats is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self.nats.round_done)
        return self.intake.drain()

    def describe(self) -> str:
        """e.g. '2 peers connected (1 lan, 1 manual); relay up, 3 more heard through it in 5 min'
        ('0 peers connected; relay up, 3 nodes heard in 5 min' when the relay carries all)."""
        recent = time.time() - 300.0
        with self._lock:
            direct = [s.via for k, s in self._stats.items() if k in self._links and s.node_id]
            relay_up = any(k.startswith("relay:") for k in self._links)
            heard = sum(
                1
                for s in self._stats.values()
                if s.node_id and s.via == "relay" and s.last_seen > recent
            )
        vias = Counter(direct)
        text = f"{len(direct)} peer{'s' if len(direct) != 1 else ''} connected"
        if vias:
            text += " (" + ", ".join(f"{n} {v}" for v, n in sorted(vias.items())) + ")"
        nodes = f"{heard} node{'s' if heard != 1 else ''} heard in 5 min"
        if direct:  # nodes linked directly are counted there, not again as heard via the relay
            nodes = f"{heard} more heard through it in 5 min"
        if self.nats is not None:
            text += f"; {self.nats.describe()}, {nodes}"
        elif self.relay_url:
            text += f"; relay {'up' if relay_up else 'down'}, {nodes}"
        return text + f"; listening on :{self.port}"

    def peers(self) -> list[PeerInfo]:
        """One row per peer heard of: name, id, model, backend, via, counts, top rejection."""
        return self.book.peers()

    def rejections(self, key: str | None = None) -> Counter:
        """Rejection reasons for one peer key (node id, 'relay:URL', 'ip:ADDR'), or all of them."""
        return self.book.rejections(key)

    def connected(self) -> list[str]:
        """Keys of the live links: peer node ids and 'relay:URL'."""
        with self._lock:
            up = self.nats is not None and self.nats.up
            return list(self._links) + ([self.nats.key] if up else [])  # type: ignore[union-attr]

    def lan_peers(self) -> set[str]:
        """Node ids that LAN discovery currently shows in this room."""
        with self._lock:
            return set(self._lan)

    # ----------------------------------------------------------------- loop side
    def _routes(self, app: web.Application) -> None:
        if self.admissions is not None:
            app.router.add_get("/admit", serve_admission(self.admissions, self.log, self._notify))

    async def _startup(self) -> None:
        await super()._startup()
        if self.nats is not None:
            await self.nats.start()

    async def _shutdown(self) -> None:
        if self.nats is not None:
            await self.nats.close()
        await super()._shutdown()

    def _broadcast(self, sealed: bytes, batch_id: str) -> None:
        self.verifier.remember(self.ident.node_id, batch_id, "self")  # our echo is not news
        self._queue_all(KIND_SEALED, sealed)
        if self.nats is not None:
            self.nats.publish(sealed)
        with self._lock:
            self.counters["published"] += 1

    def _on_sealed(self, link: Link, data: bytes) -> bool:
        """Open, verify and deliver one sealed batch; True when the link should be dropped."""
        return self.intake.accept(link.key, link.via, data)
