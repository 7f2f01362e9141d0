"""The link layer of the network transport: an asyncio loop in a background thread that listens
(behind the connection guard) and serves incoming links, with the layer's state, start, shutdown
and trace. Dialing out (manual and LAN peers, a relay, re-dialing after a sleep) is in dialing.py,
one link's life (register, read until it closes, retire a duplicate) in link_life.py; LinkLayer
puts the three together. What arrives in sealed frames is handed to `_on_sealed`, which
network.py implements (verifying and delivering batches).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from ..data.addresses import bind_address
from ..data.textsafe import clean
from .dialing import Dialing, LanDial
from .guard import ConnectionGuard, GuardedSite, GuardLimits, quiet_accept_errors
from .handshake import KIND_MESSAGE, HandshakeError, LocalInfo
from .handshake import handshake as run_handshake
from .identity import Identity
from .link_life import Link, LinkLife, send_bye
from .loop_thread import run_service_loop
from .nats_room import is_nats_url
from .peer import MAX_FRAME_BYTES, Outbox
from .peerbook import PeerBook
from .protocol import make_bye
from .resume import GapWatch
from .roomkey import RoomKeys

# `SAPO_EDGE_NET_DEBUG=1`: every dial, advert, handshake and link decision, in order, on stderr
trace_log = logging.getLogger("sapo_edge.swarm.links")
if os.environ.get("SAPO_EDGE_NET_DEBUG") and not trace_log.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("%(asctime)s net-debug %(message)s"))
    trace_log.addHandler(_h)
    trace_log.setLevel(logging.DEBUG)


class LinkLayer(Dialing, LinkLife):
    """Links and handshakes; see the module docstring. Subclassed by NetworkTransport."""

    def __init__(
        self,
        identity: Identity,
        keys: RoomKeys,
        *,
        listen: str,
        peers: list[str] | tuple[str, ...],
        relay: str,
        mdns: bool,
        mdns_interfaces: list[str] | None,
        model: str,
        backend: str,
        name: str | None,
        heartbeat: float,
        handshake_timeout: float,
        queue_limit: int,
        reconnect_base: float,
        reconnect_max: float,
        reject_threshold: int,
        reject_window: float,
        mute_base: float,
        max_tracked: int,
        guard: GuardLimits | None,
        log: Callable[[str], None],
    ) -> None:
        self.ident, self.keys, self.name = identity, keys, name or identity.name
        self.listen, self.manual, self.relay_url = listen, list(peers), relay
        self.mdns, self.model, self.backend = mdns, model, backend
        self.mdns_interfaces = mdns_interfaces  # e.g. ["127.0.0.1"] in tests; None = all
        self.heartbeat, self.handshake_timeout = heartbeat, handshake_timeout
        self.queue_limit = queue_limit
        self.reconnect_base, self.reconnect_max = reconnect_base, reconnect_max
        self.log = log
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # notified on any state change
        self.counters: Counter = Counter()  # totals: published, delivered, duplicate, rejected:*
        self.book = PeerBook(
            self._changed,
            self.counters,
            reject_threshold=reject_threshold,
            reject_window=reject_window,
            mute_base=mute_base,
            max_tracked=max_tracked,
            log=log,
            own_name=self.name,
        )
        self._stats = self.book.stats  # key -> PeerStats, guarded by self._lock
        self._links: dict[str, Link] = {}
        self._outboxes: dict[str, Outbox] = {}  # key -> its queue, kept HOLD_S past a link
        self._link_up: dict[str, asyncio.Event] = {}  # set when a link for that key registers
        self._held: dict[str, asyncio.TimerHandle] = {}  # key -> when its idle queue is dropped
        self._wake = asyncio.Event()  # set (and replaced) when the laptop wakes up
        self.watch = GapWatch(tick=1.0)  # notices the laptop waking up (see _watch_resume)
        self._lan: set[str] = set()  # node ids that mDNS currently shows in our room
        self._dials: dict[str, asyncio.Task] = {}  # manual/relay target -> dial loop
        self._lan_dials: dict[str, LanDial] = {}  # node id -> dial loop over its addresses
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self._site: GuardedSite | None = None
        # websockets being served (handshake and link): closed at shutdown before the server
        # waits for its handlers (a handshake in progress would hold the stop up to its timeout,
        # and aiohttp's cancel of such a handler can raise InvalidStateError at exit)
        self._serving: set[web.WebSocketResponse] = set()
        self._session: aiohttp.ClientSession | None = None
        self._discovery: Any = None
        self.guard = ConnectionGuard(
            guard or GuardLimits(deadline=handshake_timeout + 2.0), on_reject=self._guard_reject
        )
        self.port = 0

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
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            fut.result(timeout)
        except Exception:  # noqa: BLE001 - best effort; the loop is stopped below regardless
            with self._lock:
                self.counters["stop_timed_out"] += 1
        loop.call_soon_threadsafe(loop.stop)
        if self._thread:
            self._thread.join(timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until predicate() holds (re-checked on every network event) or timeout."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _thread_main(self) -> None:
        run_service_loop(self)

    def _routes(self, app: web.Application) -> None:
        """Extra routes (the admission endpoint); overridden by NetworkTransport."""

    async def _startup(self) -> None:
        quiet_accept_errors()
        app = web.Application()
        app.router.add_get("/ws", self._serve_ws)
        app.router.add_get("/healthz", _healthz)
        self._routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        host, port = bind_address(self.listen)  # '[::]:7744' binds '::' (was '[::]')
        try:
            site = GuardedSite(self._runner, host, port, self.guard)
            await site.start()
        except OSError as e:
            if int(port) == 0:
                raise
            self.log(f"port {port} is busy ({e.strerror}); listening on a free port instead.")
            site = GuardedSite(self._runner, host, 0, self.guard)
            await site.start()
        self.port, self._site = site.bound_port, site
        self._trace("listening", port=self.port)
        self._spawn(self._watch_resume())
        self._session = aiohttp.ClientSession()
        for target in self.manual:
            self._dial(target, "manual")
        if self.relay_url and not is_nats_url(self.relay_url):  # NATS: network.py's NatsRoute
            self._dial(self.relay_url, "relay")
        if self.mdns:
            self._spawn(self._start_discovery())

    async def _shutdown(self) -> None:
        self._stopping = True  # an advert heard while discovery closes starts no dial loop
        if self._site is not None:  # no new callers: a peer redialing now would start a handshake
            self._site.stop_listening()
        for t in list(self._dials.values()) + list(self._tasks):
            t.cancel()
        for d in self._lan_dials.values():
            self._cancel(d)
        for timer in self._held.values():
            timer.cancel()
        if self._discovery is not None:
            await self._discovery.close()
        for link in list(self._links.values()):
            try:
                await link.send(KIND_MESSAGE, make_bye("shutdown", "the node is stopping."))
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                pass
            await link.ws.close()
        for outbox in self._outboxes.values():
            outbox.close()
        # inbound handshakes in progress (linked websockets were closed above): their handlers
        # end now, before aiohttp's cleanup would cancel them
        if left := [ws for ws in self._serving if not ws.closed]:
            with self._lock:
                self.counters["closed_at_stop"] += len(left)
            await asyncio.gather(*(ws.close() for ws in left), return_exceptions=True)
        if self._session:
            await self._session.close()
        if self._runner:
            await self._runner.cleanup()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ----------------------------------------------------------------- shared by both halves
    def _info(self) -> LocalInfo:
        return LocalInfo(self.name, self.model, self.backend)

    def _note_handshake_failure(self, key: str, e: HandshakeError) -> None:
        if e.reason == "same_identity":
            self.log(f"peer {key}: {clean(str(e), 300)}")
        self._reject(key, e.reason)

    def _guard_reject(self, ip: str, reason: str) -> None:
        with self._lock:
            self.counters[f"guard:{reason}"] += 1
        self._notify()

    # ----------------------------------------------------------------- serving
    async def _serve_ws(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(
            heartbeat=self.heartbeat, max_msg_size=MAX_FRAME_BYTES, compress=False, timeout=2.0
        )
        try:
            await ws.prepare(request)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            # the caller hung up before we answered (a dropped Wi-Fi, a port scan): a plain
            # response, whose write aiohttp lets fail quietly (an unprepared websocket logs)
            return web.Response(status=400)
        self._serving.add(ws)
        self._notify()
        try:
            return await self._serve_prepared(request, ws)
        finally:
            self._serving.discard(ws)

    async def _serve_prepared(
        self, request: web.Request, ws: web.WebSocketResponse
    ) -> web.StreamResponse:
        addr = f"ip:{request.remote}"
        try:
            session = await run_handshake(
                ws,
                self.ident,
                self.keys.lan_id,
                self.keys.link_psk,
                initiator=False,
                timeout=self.handshake_timeout,
                expect_role="node",
                info=self._info(),
            )
        except HandshakeError as e:
            self._trace("handshake_failed", came_from=addr, reason=e.reason)
            self._note_handshake_failure(addr, e)
            return ws
        except (ConnectionError, RuntimeError) as e:
            self._trace("handshake_failed", came_from=addr, exc=type(e).__name__)
            return ws
        if not self.guard.promote(request.transport):  # its address holds its ceiling
            await send_bye(session, ws, "busy", "too many links from this address.")
            return ws
        node_id = session.hello.node_id
        with self._lock:
            via = "lan" if node_id in self._lan else "manual"
        await self._run_link(ws, session, via, node_id, dialer=node_id, addr=addr)
        return ws

    # ----------------------------------------------------------------- charging and tracing
    def _reject(self, key: str, reason: str) -> bool:
        return self.book.reject(key, reason)

    def _trace(self, event: str, **fields: Any) -> None:
        """One line per link event at debug level (SAPO_EDGE_NET_DEBUG=1 prints them)."""
        if trace_log.isEnabledFor(logging.DEBUG):
            me = self.ident.node_id[:8]
            text = " ".join(
                f"{k}={v[:8] if isinstance(v, str) and len(v) == 32 else v}"
                for k, v in fields.items()
            )
            trace_log.debug("%s %s %s", me, event, clean(text, 400))


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")
