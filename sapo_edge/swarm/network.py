"""NetworkTransport: the real swarm. Publishing and receiving: batches are signed, sealed for
the room and queued to every link; sealed batches that arrive are opened, verified, charged to
whoever is provably at fault (the signer, or else the route) and handed to the trainer through a
byte-bounded, fair inbox. publish() and receive() never wait for the network.

A NetworkTransport is put together from parts, each given what it uses in its constructor:
netcore.py (identity, lock, counters, peer book, log), link_life.py (the links and each peer's
queue), listener.py (the server and its handshakes), dialing.py (manual peers, the relay, LAN
adverts, waking up), intake.py (opening and verifying what arrives), stats_channel.py (members'
figures going out), publish_pace.py, and nats_transport.py's route when the relay is NATS. It
runs them on one asyncio loop in its own thread, starts and stops them in order: a Transport.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable

from aiohttp import web

from ..data.rollout import RolloutError, groups_of
from . import paths, removed
from .admission import Admissions, serve_admission
from .batches import make_rollouts, seal
from .dialing import Dialer
from .guard import GuardLimits
from .handshake import KIND_SEALED
from .identity import Identity
from .intake import Intake
from .link_life import Link, LinkTable
from .listener import Listener
from .loop_thread import run_service_loop
from .nats_room import is_nats_url
from .nats_transport import NatsRoute
from .netcore import NetCore
from .peers import PeerInfo
from .protocol import MAX_MESSAGE_BYTES
from .publish_pace import PublishPace
from .room_secret import RoomSecret
from .roomkey import RoomKeys, describe_room, room_keys
from .stats_channel import StatsChannel


class NetworkTransport:
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
        self.core = core = NetCore(
            identity,
            keys,
            name=name or identity.name,
            model=model,
            backend=backend,
            log=log,
            reject_threshold=reject_threshold,
            reject_window=reject_window,
            mute_base=mute_base,
            max_tracked=max_tracked,
        )
        self.manual, self.relay_url, self.mdns = list(peers), relay, mdns  # read at start()
        self.room = keys.lan_id
        self.admissions = admissions
        self.secret = RoomSecret(self)  # a class's host replaces the room's key (room_secret.py)
        self.table = LinkTable(
            core,
            handshake_timeout=handshake_timeout,
            queue_limit=queue_limit,
            on_sealed=self._on_sealed,
            spawn=self._spawn,
            first_words=self.secret.first_words,
            on_rekey=self.secret.heard,
        )
        self.dialer = Dialer(
            core,
            self.table,
            port=lambda: self.listener.port,
            spawn=self._spawn,
            heartbeat=heartbeat,
            handshake_timeout=handshake_timeout,
            reconnect_base=reconnect_base,
            reconnect_max=reconnect_max,
            mdns_interfaces=mdns_interfaces,
        )
        self.listener = Listener(
            core,
            self.table,
            listen=listen,
            heartbeat=heartbeat,
            handshake_timeout=handshake_timeout,
            guard=guard,
            is_lan=self.dialer.lan.__contains__,
            routes=self._routes,
        )
        self.intake = Intake(
            identity.node_id,
            keys,
            core.book,
            window_s=window_s,
            stale_rounds=stale_rounds,
            inbox_limit=inbox_limit,
            inbox_bytes=inbox_bytes,
            max_batches_per_minute=max_batches_per_minute,
            notify=core.notify,
            accepted=core.ring.accepted,
        )
        self.verifier, self.inbox = self.intake.verifier, self.intake.inbox
        self.pace = PublishPace(core, max_batches_per_minute)
        self.nats: NatsRoute | None = None
        if is_nats_url(relay):  # the room over a NATS server or cluster, sharded
            self.nats = NatsRoute(
                relay,
                keys.relay_id,
                self.intake,
                name=core.name,
                budget_groups=max_inbound_groups,
                log=lambda text: core.log(text),
                **(nats_options or {}),
            )
        # members' figures and progress go out through it (publish_stats, publish_progress,
        # send_goodbye, announce; on_stats hears members'), and come in through the intake
        self.stats = StatsChannel(core, self.table, self.intake, self.nats, lambda: self._loop)
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.closed = False  # close() was called: this node has left its room's network
        if keys.is_open:
            log(describe_room(keys))

    # ----------------------------------------------------------------- who, as the parts see it
    @property
    def ident(self) -> Identity:
        return self.core.ident

    @property
    def keys(self) -> RoomKeys:
        return self.core.keys

    @property
    def name(self) -> str:
        return self.core.name

    model = property(lambda self: self.core.model)  # what handshakes tell peers (tell_peers)
    backend = property(lambda self: self.core.backend)

    @property
    def log(self) -> Callable[[str], None]:
        return self.core.log

    @log.setter
    def log(self, log: Callable[[str], None]) -> None:  # e.g. quiet after a run's summary
        self.core.log = log

    @property
    def counters(self) -> Counter:
        return self.core.counters

    book = property(lambda self: self.core.book)
    listen = property(lambda self: self.listener.listen)
    port = property(lambda self: self.listener.port)
    guard = property(lambda self: self.listener.guard)

    @property
    def via_words(self) -> dict[str, str]:
        return self.table.via_words

    @via_words.setter
    def via_words(self, words: dict[str, str]) -> None:
        self.table.via_words = words

    def tell_peers(self, model: str, backend: str) -> None:
        """What handshakes from now on tell peers this node trains (its model, once loaded, and
        `kind/device`); links made before keep what they were told."""
        with self.core.lock:
            self.core.model, self.core.backend = model, backend

    def tune(self, **timings: float) -> NetworkTransport:
        """Change link timings (heartbeat, handshake_timeout, reconnect_base, reconnect_max) in
        every part that uses them, from the next link or dial on (tests: loopback's)."""
        users = {
            "heartbeat": (self.listener, self.dialer),
            "handshake_timeout": (self.listener, self.dialer, self.table),
            "reconnect_base": (self.dialer,),
            "reconnect_max": (self.dialer,),
        }
        for key, value in timings.items():
            if key not in users:
                raise TypeError(f"tune() has no timing {key!r}")
            for part in users[key]:
                setattr(part, key, value)
        return self

    # ----------------------------------------------------------------- thread and loop
    def start(self, timeout: float = 30.0):
        """Start the network thread (a second call does nothing: `join` starts its node's
        network before the model loads, so the class sees it from the start). A start that
        failed leaves it unstarted: the next call tries again and raises its own error; one
        that timed out is waited for again by the next call, which raises again if it is still
        not up."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._thread_main, name="sapo-net", daemon=True)
            self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the network thread did not start in time.")
        if self._error:  # its thread has ended: a later start() tries again (and says why)
            error, self._error = self._error, None
            self._thread.join(timeout)
            self._thread = None
            self._ready.clear()
            raise error
        return self

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            fut.result(timeout)
        except Exception:  # noqa: BLE001 - best effort; the loop is stopped below regardless
            self.core.count("stop_timed_out")
        loop.call_soon_threadsafe(loop.stop)
        if self._thread:
            self._thread.join(timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until predicate() holds (re-checked on every network event) or timeout."""
        return self.core.wait_for(predicate, timeout)

    def _thread_main(self) -> None:
        run_service_loop(self)  # runs _startup, sets _loop, _ready and _error

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

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
        if any(g.producer != self.core.ident.node_id for g in groups):
            self.log(
                "not publishing: groups must name this node's id as producer (peers refuse others)."
            )
            return
        if not self.pace.take():
            return
        msg, batch_id = make_rollouts(self.ident, self.keys, payload, max(g.round for g in groups))
        if len(msg) > MAX_MESSAGE_BYTES:
            self.core.count("publish_too_large")
            self.log(f"a batch of {len(msg)} bytes is over the 1 MiB message limit; not sent.")
            return
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._broadcast, seal(self.keys, msg), batch_id)

    def receive(self) -> list[tuple[str, bytes]]:
        """What arrived since the last call; one call per round (the NATS budget's clock)."""
        if self.nats is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self.nats.round_done)
        return self.intake.drain()

    def describe(self) -> str:
        """A line for status displays: the paths that carry this node (paths.py)."""
        return paths.describe(self)

    def paths(self) -> paths.Paths:
        """Which paths carry this node now (paths.py): one value every display formats."""
        return paths.of(self)

    def peers(self) -> list[PeerInfo]:
        """One row per peer heard of: name, id, model, backend, via, counts, top rejection."""
        return self.book.peers()

    def rejections(self, key: str | None = None) -> Counter:
        """Rejection reasons for one peer key (node id, 'relay:URL', 'ip:ADDR'), or all of them."""
        return self.book.rejections(key)

    def remove_member(self, node_id: str) -> int:
        """The host removed `node_id` from the class: refused from now on (removed.py)."""
        return removed.remove(self, node_id)

    def readmit_member(self, node_id: str) -> None:
        removed.readmit(self, node_id)

    def replace_room_key(self, holders: Callable[[str], bool], told: Callable[[str], bool]) -> str:
        """The class's host: new secret keys for the room, given to the members `holders` names
        over their own links; `told` may still link with the old ones, to be refused as removed
        (room_secret.py). The secret as hex, for later welcomes."""
        return self.secret.replace(holders, told)

    def heed_room_key(self, host_id: str, secret_hex: str = "") -> None:
        """A class's member: its host's new secrets, and its welcome's (room_secret.py)."""
        self.secret.heed(host_id, secret_hex)

    def connected(self) -> list[str]:
        """Keys of the live links: peer node ids and 'relay:URL'."""
        with self.core.lock:
            up = self.nats is not None and self.nats.up
            return list(self.table.links) + ([self.nats.key] if up else [])  # type: ignore[union-attr]

    def lan_peers(self) -> set[str]:
        """Node ids that LAN discovery currently shows in this room."""
        with self.core.lock:
            return set(self.dialer.lan)

    # ----------------------------------------------------------------- loop side
    def _routes(self, app: web.Application) -> None:
        if self.admissions is not None:
            app.router.add_get(
                "/admit", serve_admission(self.admissions, self.log, self.core.notify)
            )

    async def _startup(self) -> None:
        """On the network's loop (loop_thread.py): listen, then dial and browse, then NATS."""
        await self.listener.start()
        relay = "" if is_nats_url(self.relay_url) else self.relay_url  # NATS: its own route
        await self.dialer.start(self.manual, relay, self.mdns)
        if self.nats is not None:
            await self.nats.start()

    async def _shutdown(self) -> None:
        if self.nats is not None:
            await self.nats.close()
        self.listener.stop_listening()
        for t in list(self._tasks):  # retire deadlines, discovery starting, the wake-up watch
            t.cancel()
        await self.dialer.stop()
        await self.table.close_all()
        await self.listener.close()
        await self.dialer.close_session()

    def _broadcast(self, sealed: bytes, batch_id: str) -> None:
        self.verifier.remember(self.ident.node_id, batch_id, "self")  # our echo is not news
        self.table.queue_all(KIND_SEALED, sealed)
        if self.nats is not None:
            self.nats.publish(sealed)
        self.core.count("published")

    def _on_sealed(self, link: Link, data: bytes) -> bool:
        """Open, verify and deliver one sealed batch; True when the link should be dropped."""
        return self.intake.accept(link.key, link.via, data)
