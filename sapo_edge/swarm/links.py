"""The link half of the network transport: an asyncio loop in a background thread that listens
(behind the connection guard), dials manual/LAN peers and a relay, runs the handshake, and reads
each authenticated link until it closes. What arrives in sealed frames is handed to
`_on_sealed`, which network.py implements (verifying and delivering batches).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from sapo_edge.textsafe import clean

from .guard import ConnectionGuard, GuardedSite, GuardLimits, quiet_accept_errors
from .handshake import KIND_MESSAGE, KIND_SEALED, HandshakeError, LinkBroken, LocalInfo, Session
from .handshake import handshake as run_handshake
from .identity import Identity
from .loop_thread import run_service_loop
from .nats_transport import is_nats_url
from .peer import MAX_FRAME_BYTES, Closed, Outbox, read_raw
from .peerbook import PeerBook, PeerStats
from .protocol import Bye, ProtocolError, make_bye, parse_message
from .resume import GapWatch
from .roomkey import RoomKeys

MAX_LAN_DIALS = 32  # dial loops for LAN adverts; a failing one makes room for a new advert
MAX_CANDIDATES = 4  # addresses remembered per advertised node id
RESUME_GAP_S = 3.0  # the loop stood still this long (asleep, stopped): re-dial at once
# how long a peer's queue waits for a new link after one ends (a replaced or dropped link):
# batches published meanwhile go on the next link instead of being lost
HOLD_S = 15.0

# `SAPO_EDGE_NET_DEBUG=1`: every dial, advert, handshake and link decision, in order, on stderr
trace_log = logging.getLogger("sapo_edge.swarm.links")
if os.environ.get("SAPO_EDGE_NET_DEBUG") and not trace_log.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("%(asctime)s net-debug %(message)s"))
    trace_log.addHandler(_h)
    trace_log.setLevel(logging.DEBUG)


@dataclass
class Link:
    key: str  # peer node id, or "relay:URL"
    session: Session
    via: str
    dialer: str  # node id of the side that opened the connection
    ws: Any
    addr: str  # "ip:ADDR": where frames that fail authentication are charged
    outbox: Outbox  # the peer's queue: sends on this link while it is the registered one
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    retiring: bool = False  # we said "duplicate_connection" on it: read it until the peer does
    bye: str = ""  # the reason of the peer's goodbye, once read
    deadline: asyncio.Task | None = None  # closes a retiring link whose peer does not answer

    @property
    def node_id(self) -> str:
        return self.session.hello.node_id

    @property
    def name(self) -> str:
        return clean(self.session.auth.name, 64)

    async def send(self, kind: int, data: bytes) -> None:
        await self.session.channel.send(kind, data)


@dataclass
class _LanDial:
    task: asyncio.Task | None
    candidates: list[str]  # HOST:PORT, the most recently advertised first
    failures: int = 0
    said_goodbye: bool = False  # an mDNS goodbye came: believed once a dial fails


class LinkLayer:
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
        self._lan_dials: dict[str, _LanDial] = {}  # node id -> dial loop over its addresses
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._discovery: Any = None
        self.guard = ConnectionGuard(
            guard or GuardLimits(deadline=handshake_timeout + 2.0), on_reject=self._guard_reject
        )
        self.port = 0

    # ----------------------------------------------------------------- thread and loop
    def start(self, timeout: float = 30.0):
        """Start the network thread (a second call does nothing: `join` starts its node's
        network before the model loads, so the class sees it from the start)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._thread_main, name="sapo-net", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the network thread did not start in time.")
        if self._error:
            raise self._error
        return self

    def close(self, timeout: float = 10.0) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            fut.result(timeout)
        except Exception:  # noqa: BLE001 - best effort; the loop is stopped below regardless
            pass
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
        host, _, port = self.listen.rpartition(":")
        host = host or "0.0.0.0"
        try:
            site = GuardedSite(self._runner, host, int(port), self.guard)
            await site.start()
        except OSError as e:
            if int(port) == 0:
                raise
            self.log(f"port {port} is busy ({e.strerror}); listening on a free port instead.")
            site = GuardedSite(self._runner, host, 0, self.guard)
            await site.start()
        self.port = site.bound_port
        self._trace("listening", port=self.port)
        self._spawn(self._watch_resume())
        self._session = aiohttp.ClientSession()
        for target in self.manual:
            self._dial(target, "manual")
        if self.relay_url and not is_nats_url(self.relay_url):  # NATS: network.py's NatsRoute
            self._dial(self.relay_url, "relay")
        if self.mdns:
            self._spawn(self._start_discovery())

    async def _start_discovery(self) -> None:
        """Advertise and browse in the background: mDNS probing takes a second or two."""
        from .discovery import LanDiscovery

        disc = LanDiscovery(
            self.ident.node_id,
            self.keys.lan_id,
            self.port,
            self.model,
            on_found=self._on_found,
            on_lost=self._on_lost,
            log=self.log,
            on_event=self._notify,
            interfaces=self.mdns_interfaces,
            addresses=self.mdns_interfaces,
        )
        self._discovery = disc
        try:
            await disc.start()
        except OSError as e:
            self.log(f"LAN discovery is off ({e}); use --peer HOST:PORT or --relay.")
            self._discovery = None

    async def _shutdown(self) -> None:
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
        if self._session:
            await self._session.close()
        if self._runner:
            await self._runner.cleanup()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ----------------------------------------------------------------- discovery
    def _on_found(self, node_id: str, host: str, port: int) -> None:
        """An advert in our room: remember the address and keep one dial loop per node id."""
        if node_id == self.ident.node_id:
            return
        target = f"{host}:{port}"
        self._trace("advert", peer=node_id, at=target, linked=node_id in self._links)
        with self._lock:
            self._lan.add(node_id)
        link = self._links.get(node_id)
        if link is not None and link.via == "manual":  # it dialed us first: it is on our LAN
            link.via = "lan"
            with self._lock:
                self._stats[node_id].via = "lan"
        dial = self._lan_dials.get(node_id)
        if dial is not None:  # a new address for a known id: tried next (it may be the real one)
            dial.said_goodbye = False
            if target in dial.candidates:
                dial.candidates.remove(target)
            dial.candidates.insert(0, target)
            del dial.candidates[MAX_CANDIDATES:]
            return
        if len(self._lan_dials) >= MAX_LAN_DIALS:
            worst = max(self._lan_dials, key=lambda k: self._lan_dials[k].failures)
            if self._lan_dials[worst].failures < 2:
                self.counters["lan_dials_full"] += 1
                return
            self._cancel(self._lan_dials.pop(worst))
        entry = _LanDial(None, [target])
        self._lan_dials[node_id] = entry
        entry.task = asyncio.get_running_loop().create_task(self._lan_dial_loop(node_id, entry))

    def _on_lost(self, node_id: str) -> None:
        """An mDNS goodbye for this id. Anyone on the LAN can send one (unsigned), so it does
        not end the dial loop at once: the loop stops the next time a dial fails. A peer that
        really left is forgotten after one refused dial; a live one spoofed away is redialed
        when its link drops, as before."""
        self._trace("advert_gone", peer=node_id)
        dial = self._lan_dials.get(node_id)
        if dial is not None:
            dial.said_goodbye = True
            self.counters["lan_goodbyes"] += 1
        with self._lock:
            self._lan.discard(node_id)

    @staticmethod
    def _cancel(dial: _LanDial) -> None:
        if dial.task is not None:
            dial.task.cancel()

    async def _lan_dial_loop(self, node_id: str, entry: _LanDial) -> None:
        """Dial the first candidate address; a failing one goes to the back, so a newly
        advertised address (put first by _on_found) is tried next."""
        while True:
            link = self._links.get(node_id)
            if link is not None:  # already linked (maybe they dialed us): wait until it drops
                await link.closed.wait()
                await asyncio.sleep(0)  # never spin on a link that is still being forgotten
                continue
            await self._wait_unmuted(node_id)
            target = entry.candidates[0]
            peer, bye = await self._dial_once(target, "lan", node_id)
            if peer:
                entry.failures = 0
                if bye == "duplicate_connection":
                    await self._wait_link(node_id)
                continue
            entry.failures += 1
            if entry.said_goodbye:  # it said goodbye and does not answer: it left
                if self._lan_dials.get(node_id) is entry:
                    del self._lan_dials[node_id]
                self._notify()
                return
            if entry.candidates and entry.candidates[0] == target:
                entry.candidates.append(entry.candidates.pop(0))
            self._notify()
            await self._backoff(entry.failures)

    # ----------------------------------------------------------------- dialing
    def _dial(self, target: str, via: str) -> None:
        self._dials[f"{via}:{target}"] = asyncio.get_running_loop().create_task(
            self._dial_loop(target, via)
        )

    async def _dial_loop(self, target: str, via: str) -> None:
        failures = 0
        node_id = ""
        while True:
            link = self._links.get(node_id) if node_id else None
            if link is not None:
                await link.closed.wait()
                await asyncio.sleep(0)
                continue
            if node_id:
                await self._wait_unmuted(node_id)
            got, bye = await self._dial_once(target, via, "")
            if got:
                failures = 0
                node_id = got if via != "relay" else ""
                if node_id and bye == "duplicate_connection":
                    await self._wait_link(node_id)
            else:
                failures += 1
            await self._backoff(max(failures, 1))

    async def _wait_unmuted(self, node_id: str) -> None:
        muted = self._stats.get(node_id)
        if muted and muted.muted_until > time.time():
            await asyncio.sleep(muted.muted_until - time.time())

    async def _backoff(self, failures: int) -> None:
        delay = min(self.reconnect_max, self.reconnect_base * 2 ** min(failures - 1, 16))
        await self._nap(delay * random.uniform(0.5, 1.0))

    async def _nap(self, seconds: float) -> None:
        """Sleep, cut short when the laptop wakes up (_on_resume)."""
        wake = self._wake
        try:
            async with asyncio.timeout(seconds):
                await wake.wait()
        except TimeoutError:
            pass

    async def _wait_link(self, key: str) -> None:
        """After a link of ours ended: if the peer said it keeps another link to us (both sides
        dialed at once), wait until that one registers here before dialing again (bounded)."""
        if key in self._links:
            return
        ev = self._link_up.setdefault(key, asyncio.Event())
        try:
            async with asyncio.timeout(self.handshake_timeout):
                await ev.wait()
        except TimeoutError:
            pass
        finally:
            if self._link_up.get(key) is ev and not ev.is_set():
                del self._link_up[key]

    # ----------------------------------------------------------------- waking up
    async def _watch_resume(self) -> None:
        """A laptop that slept (or a process that was stopped) finds its dialers in the middle
        of a backoff that is counted in a clock that stood still, and its links dead on the
        other side (it answered no pings). Once a second, compare the wall and monotonic clocks
        with the last tick; after a gap, re-dial at once (_on_resume)."""
        self.watch.reset()  # the time between making this node and starting it is no gap
        while True:
            await asyncio.sleep(self.watch.tick)
            gap = self.watch.gap()
            if gap >= RESUME_GAP_S:
                await self._on_resume(gap)

    async def _on_resume(self, gap: float) -> None:
        with self._lock:
            self.counters["resumed"] += 1
        self.log(f"woke up after {gap:.0f} s away: re-dialing peers now")
        self._trace("resume", gap=round(gap, 1), links=len(self._links))
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()  # every backoff in progress ends now
        if gap > 1.5 * self.heartbeat:  # peers stopped hearing our pongs: those links are dead
            stale = list(self._links.values())
            for link in stale:
                self._trace("close_stale", peer=link.key)
            # at once: closing a dead link waits for the close timeout, one per peer in a row
            # would keep a class's last peers waiting
            await asyncio.gather(*(link.ws.close() for link in stale), return_exceptions=True)
        self._notify()

    async def _dial_once(self, target: str, via: str, expect_id: str) -> tuple[str, str]:
        """Connect, handshake and run one link to its end; the peer's node id ('' on failure)
        and the reason of its goodbye ('' when it said none).
        Every step has a deadline: an address that accepts and then stalls costs seconds."""
        self._trace("dial", at=target, via=via, expect=expect_id)
        url = target if "://" in target else f"ws://{target}"
        if not url.rstrip("/").endswith("/ws"):
            url = url.rstrip("/") + "/ws"
        host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
        addr = f"ip:{host}"
        relay = via == "relay"
        assert self._session is not None
        try:
            async with asyncio.timeout(self.handshake_timeout):
                ws = await self._session.ws_connect(
                    url,
                    heartbeat=self.heartbeat,
                    max_msg_size=MAX_FRAME_BYTES,
                    compress=0,
                    timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
                )
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            with self._lock:
                self.counters["dial_failed"] += 1
            self._trace("dial_failed", at=target, exc=type(e).__name__)
            self._notify()
            return "", ""
        try:
            session = await run_handshake(
                ws,
                self.ident,
                self.keys.relay_id if relay else self.keys.lan_id,
                b"" if relay else self.keys.link_psk,
                initiator=True,
                timeout=self.handshake_timeout,
                expect_role="relay" if relay else "node",
                info=self._info(),
            )
        except HandshakeError as e:
            self._trace("handshake_failed", at=target, reason=e.reason)
            self._note_handshake_failure(addr, e)
            await ws.close()
            return "", ""
        except (ConnectionError, RuntimeError, aiohttp.ClientError) as e:
            self._trace("handshake_failed", at=target, exc=type(e).__name__)
            await ws.close()
            return "", ""
        peer_id = session.hello.node_id
        if expect_id and peer_id != expect_id:  # the advert lied about whose address this is
            self._reject(addr, "wrong_node")
            await _bye(session, ws, "wrong_node", "you are not the node advertised here.")
            return "", ""
        key = f"relay:{target}" if relay else peer_id
        link = await self._run_link(ws, session, via, key, dialer=self.ident.node_id, addr=addr)
        return peer_id, link.bye if link is not None else ""

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
            await _bye(session, ws, "busy", "too many links from this address.")
            return ws
        node_id = session.hello.node_id
        with self._lock:
            via = "lan" if node_id in self._lan else "manual"
        await self._run_link(ws, session, via, node_id, dialer=node_id, addr=addr)
        return ws

    # ----------------------------------------------------------------- one link
    def _queue_all(self, kind: int, data: bytes) -> None:
        """Queue a frame for every peer: linked ones, and ones whose link ended less than
        HOLD_S ago (it goes on their next link)."""
        for outbox in self._outboxes.values():
            outbox.put(kind, data)

    def _outbox(self, key: str) -> Outbox:
        outbox = self._outboxes.get(key)
        if outbox is None:
            outbox = self._outboxes[key] = Outbox(None, None, self.queue_limit)
        return outbox

    def _hold(self, key: str, outbox: Outbox) -> None:
        """The key's link ended: keep its queue HOLD_S for the next link (not a relay's: what
        the relay misses while it is down is not sent twice), then let it go."""
        if key.startswith("relay:"):
            self._drop_outbox(key, outbox)
            return
        if (timer := self._held.pop(key, None)) is not None:
            timer.cancel()
        self._held[key] = asyncio.get_running_loop().call_later(HOLD_S, self._expire, key, outbox)

    def _expire(self, key: str, outbox: Outbox) -> None:
        self._held.pop(key, None)
        if outbox.owner is None and key not in self._links:
            self._drop_outbox(key, outbox)

    def _drop_outbox(self, key: str, outbox: Outbox) -> None:
        if self._outboxes.get(key) is outbox:
            del self._outboxes[key]
        outbox.close()

    async def _run_link(
        self, ws, session: Session, via: str, key: str, dialer: str, addr: str
    ) -> Link | None:
        """Register an authenticated link, read it until it closes, then forget it.

        Two links with one peer (both dialed at once): both sides keep the one dialed by the
        smaller node id (or, when one node dialed both, its newer one: it gave up the older).
        The other is retired without losing a frame: the peer's queue moves to the kept link
        first, then we say "duplicate_connection" on the retired one as our last frame on it,
        and read it until the peer says the same (or a deadline), delivering what it sent."""
        relay = key.startswith("relay:")
        st = self.book.stat(key, None if relay else session.auth, via, node_id=key)
        if not relay and st.muted_until > time.time():
            await _bye(session, ws, "muted", "too many rejected messages; try later.")
            return None
        old = self._links.get(key)
        keep_new = True
        if old is not None:
            if relay:
                keep_new = False
            elif old.dialer != dialer:
                keep_new = dialer == min(self.ident.node_id, session.hello.node_id)
        self._trace(
            "link",
            peer=key,
            dialer=dialer,
            via=via,
            had=old.dialer if old is not None else "",
            keep=keep_new,
        )
        outbox = self._outbox(key)
        link = Link(key, session, via, dialer, ws, addr, outbox)
        if not keep_new:
            if relay:
                await _bye(session, ws, "duplicate_connection", "already connected.")
                return None
            await self._retire(link)
            await self._read_link(link, st)
            link.closed.set()
            return link
        with self._lock:
            self._links[key] = link
            st.connected, st.last_seen = True, time.time()
        if old is not None:
            await outbox.detach()  # no frame of ours is on its way on the old link now
        outbox.attach(session.channel.send, lambda: ws.closed, link)
        if (ev := self._link_up.pop(key, None)) is not None:
            ev.set()
        self._notify()
        if not relay:
            self.log(f"peer {link.name} ({key[:8]}) connected via {via}")
        if old is not None:
            await self._retire(old)
        try:
            await self._read_link(link, st)
        finally:
            if outbox.owner is link:
                await outbox.detach()
            if self._links.get(key) is link:
                with self._lock:
                    del self._links[key]
                    st.connected = False
                self._hold(key, outbox)
                self._notify()
                self._trace("unlinked", peer=key, bye=link.bye)
                if not relay:
                    self.log(f"peer {link.name} ({key[:8]}) disconnected")
            link.closed.set()  # after it left _links: a dial loop waiting on it dials again
        return link

    async def _retire(self, link: Link) -> None:
        """Say "duplicate_connection" on a link we stop sending on (our last frame on it), and
        close it if the peer does not say the same within the handshake timeout."""
        if link.retiring:
            return
        link.retiring = True
        with self._lock:
            self.counters["links_retired"] += 1
        self._trace("retire", peer=link.key, dialer=link.dialer)
        try:
            await link.send(KIND_MESSAGE, make_bye("duplicate_connection", "already connected."))
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            await link.ws.close()
            return

        async def deadline() -> None:
            await asyncio.sleep(self.handshake_timeout)
            await link.ws.close()

        link.deadline = self._spawn(deadline())

    async def _read_link(self, link: Link, st: PeerStats) -> None:
        try:
            while not link.ws.closed:
                if await self._read_frame(link, st):
                    break
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass
        finally:
            if link.deadline is not None:
                link.deadline.cancel()
            try:
                await link.ws.close()
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                pass  # already gone

    async def _read_frame(self, link: Link, st: PeerStats) -> bool:
        """Read and handle one frame; True when the link must end."""
        raw = await read_raw(link.ws)
        if isinstance(raw, Closed):
            if raw.reason == "no_pong":  # asleep or off the Wi-Fi: counted, never muted
                self.book.reject(link.key, raw.reason, mute=False)
            elif raw.reason:  # transport-level junk: nobody proved they sent it
                self._reject(link.addr, raw.reason)
            return True
        if isinstance(raw, str):
            self._reject(link.addr, "bad_frame")
            return True
        try:
            kind, data = link.session.channel.open(raw)
        except LinkBroken:  # not from the authenticated peer: drop the link, blame the address
            self._reject(link.addr, "bad_frame")
            return True
        with self._lock:
            st.last_seen = time.time()
        if kind == KIND_SEALED:
            if self._on_sealed(link, data):
                await _bye(link.session, link.ws, "muted", "too many rejected messages.")
                return True
            return False
        if kind != KIND_MESSAGE:
            return await self._refuse(link, "unknown_type")
        try:
            msg = parse_message(data)
        except ProtocolError as e:
            return await self._refuse(link, e.reason)
        if isinstance(msg, Bye):
            link.bye = msg.reason
            if msg.reason == "same_identity":
                self.log(f"peer {link.name}: {clean(msg.message, 300)}")
            if msg.reason == "duplicate_connection" and not link.retiring:
                # the peer keeps another link to us: our queue waits for it (HOLD_S); our own
                # goodbye, after our last frame here, lets the peer stop reading this one
                if link.outbox.owner is link:
                    await link.outbox.detach()
                await self._retire(link)
            return True
        return await self._refuse(link, "unexpected_message")

    async def _refuse(self, link: Link, reason: str) -> bool:
        """The authenticated peer sent something bad: charge it; True when now muted."""
        if self._reject(link.key, reason):
            await _bye(link.session, link.ws, "muted", "too many rejected messages.")
            return True
        return False

    def _on_sealed(self, link: Link, data: bytes) -> bool:
        raise NotImplementedError

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


async def _bye(session: Session, ws, reason: str, message: str) -> None:
    try:
        await session.channel.send(KIND_MESSAGE, make_bye(reason, message))
    except (ConnectionError, RuntimeError, aiohttp.ClientError):
        pass
    await ws.close()


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")
