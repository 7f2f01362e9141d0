"""NetworkTransport: the real swarm. An asyncio loop in a background thread serves aiohttp
websockets, dials manual/LAN peers and a relay, verifies signed batches and hands them to the
trainer through a thread-safe inbox. publish() and receive() never wait for the network.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from sapo_edge.rollout import RolloutError, decode_batch

from .identity import Identity
from .peer import Closed, HandshakeError, Outbox, handshake, read_message
from .peerbook import PeerBook, PeerStats, printable
from .peers import PeerInfo
from .protocol import (
    MAX_MESSAGE_BYTES,
    Bye,
    Hello,
    ProtocolError,
    Rollouts,
    RolloutVerifier,
    make_bye,
    make_rollouts,
    room_hash,
    room_key,
)

# Reasons that say the route (the connection) misbehaved rather than a signer we could verify.
_ROUTE_REASONS = {"bad_identity", "bad_signature"}


@dataclass
class _Link:
    key: str  # peer node id, or "relay:URL"
    hello: Hello
    via: str
    dialer: str  # node id of the side that opened the connection
    ws: Any
    outbox: Outbox
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class NetworkTransport:
    """Transport over websockets; see the module docstring. Call start() before use, close() after."""

    def __init__(
        self,
        identity: Identity,
        *,
        room: str = "default",
        secret: str = "",
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
        reconnect_base: float = 1.0,
        reconnect_max: float = 60.0,
        reject_threshold: int = 20,
        reject_window: float = 60.0,
        mute_base: float = 30.0,
        window_s: float = 300.0,
        stale_rounds: int = 10,
        max_batches_per_minute: int = 60,
        max_tracked: int = 4096,
        log: Callable[[str], None] = print,
    ) -> None:
        self.ident, self.name = identity, name or identity.name
        self.room, self.key = room_hash(room), room_key(room, secret)
        self.listen, self.manual, self.relay_url = listen, list(peers), relay
        self.mdns, self.model, self.backend = mdns, model, backend
        self.mdns_interfaces = mdns_interfaces  # e.g. ["127.0.0.1"] in tests; None = all
        self.heartbeat, self.handshake_timeout = heartbeat, handshake_timeout
        self.queue_limit, self.inbox_limit = queue_limit, inbox_limit
        self.reconnect_base, self.reconnect_max = reconnect_base, reconnect_max
        self.max_batches_per_minute = max_batches_per_minute
        self.log = log
        self.verifier = RolloutVerifier(
            self.room, self.key, window_s=window_s, stale_rounds=stale_rounds
        )
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # notified on any state change
        self._inbox: deque[tuple[str, bytes]] = deque()
        self.counters: Counter = Counter()  # totals: published, delivered, duplicate, rejected:*
        self.book = PeerBook(
            self._changed,
            self.counters,
            reject_threshold=reject_threshold,
            reject_window=reject_window,
            mute_base=mute_base,
            max_tracked=max_tracked,
            log=log,
        )
        self._stats = self.book.stats  # key -> PeerStats, guarded by self._lock
        self._links: dict[str, _Link] = {}
        self._lan: set[str] = set()  # node ids that mDNS currently shows in our room
        self._dials: dict[str, asyncio.Task] = {}  # target -> dial loop
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._discovery: Any = None
        self.port = 0

    # ----------------------------------------------------------------- public (any thread)
    def start(self, timeout: float = 30.0) -> NetworkTransport:
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

    def publish(self, payload: bytes) -> None:
        """Sign `payload` (an encoded batch of this node's groups) and queue it for every link."""
        try:
            groups = decode_batch(payload)
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
        msg, batch_id = make_rollouts(
            self.ident, self.room, self.key, payload, max(g.round for g in groups)
        )
        if len(msg) > MAX_MESSAGE_BYTES:
            with self._lock:
                self.counters["publish_too_large"] += 1
            self.log(f"a batch of {len(msg)} bytes is over the 1 MiB message limit; not sent.")
            return
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._broadcast, msg, batch_id)

    def receive(self) -> list[tuple[str, bytes]]:
        with self._lock:
            items = list(self._inbox)
            self._inbox.clear()
        return items

    def describe(self) -> str:
        """e.g. '2 peers connected (1 lan, 1 manual); relay up, 3 nodes heard in 5 min'."""
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
        if self.relay_url:
            text += f"; relay {'up' if relay_up else 'down'}, {heard} node{'s' if heard != 1 else ''} heard in 5 min"
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
            return list(self._links)

    def lan_peers(self) -> set[str]:
        """Node ids that LAN discovery currently shows in this room."""
        with self._lock:
            return set(self._lan)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until predicate() holds (re-checked on every network event) or timeout."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # ----------------------------------------------------------------- loop side
    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as e:  # noqa: BLE001 - reported to start()'s caller
            self._error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _startup(self) -> None:
        app = web.Application()
        app.router.add_get("/ws", self._serve_ws)
        app.router.add_get("/healthz", _healthz)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        host, _, port = self.listen.rpartition(":")
        host = host or "0.0.0.0"
        try:
            site = web.TCPSite(self._runner, host, int(port))
            await site.start()
        except OSError as e:
            if int(port) == 0:
                raise
            self.log(f"port {port} is busy ({e.strerror}); listening on a free port instead.")
            site = web.TCPSite(self._runner, host, 0)
            await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._session = aiohttp.ClientSession()
        for target in self.manual:
            self._dial(target, "manual")
        if self.relay_url:
            self._dial(self.relay_url, "relay")
        if self.mdns:
            self._spawn(self._start_discovery())

    async def _start_discovery(self) -> None:
        """Advertise and browse in the background: mDNS probing takes a second or two."""
        from .discovery import LanDiscovery

        disc = LanDiscovery(
            self.ident.node_id,
            self.room,
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
        if self._discovery is not None:
            await self._discovery.close()
        for link in list(self._links.values()):
            try:
                await link.ws.send_bytes(make_bye("shutdown", "the node is stopping."))
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                pass
            await link.ws.close()
        if self._session:
            await self._session.close()
        if self._runner:
            await self._runner.cleanup()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _broadcast(self, msg: bytes, batch_id: str) -> None:
        self.verifier.seen[batch_id] = "self"  # our own batch echoed back is not news
        for link in self._links.values():
            link.outbox.put(msg)
        with self._lock:
            self.counters["published"] += 1

    # discovery callbacks (loop thread)
    def _on_found(self, node_id: str, host: str, port: int) -> None:
        target = f"{host}:{port}"
        with self._lock:
            self._lan.add(node_id)
        link = self._links.get(node_id)
        if link is not None and link.via == "manual":  # it dialed us first: it is on our LAN
            link.via = "lan"
            with self._lock:
                self._stats[node_id].via = "lan"
        if node_id != self.ident.node_id and f"lan:{node_id}" not in self._dials:
            self._dial(target, "lan", dial_key=f"lan:{node_id}", node_id=node_id)

    def _on_lost(self, node_id: str) -> None:
        task = self._dials.pop(f"lan:{node_id}", None)
        if task:
            task.cancel()
        with self._lock:
            self._lan.discard(node_id)

    def _dial(self, target: str, via: str, dial_key: str | None = None, node_id: str = "") -> None:
        key = dial_key or f"{via}:{target}"
        self._dials[key] = asyncio.get_running_loop().create_task(
            self._dial_loop(target, via, node_id)
        )

    async def _dial_loop(self, target: str, via: str, node_id: str) -> None:
        url = target if "://" in target else f"ws://{target}"
        if not url.rstrip("/").endswith("/ws"):
            url = url.rstrip("/") + "/ws"
        attempt = 0
        while True:
            link = self._links.get(node_id) if node_id else None
            if link is not None:  # already linked (maybe they dialed us): wait until it drops
                await link.closed.wait()
                continue
            muted = self._stats.get(node_id)
            if muted and muted.muted_until > time.time():
                await asyncio.sleep(muted.muted_until - time.time())
            try:
                assert self._session is not None
                ws = await self._session.ws_connect(
                    url,
                    heartbeat=self.heartbeat,
                    max_msg_size=MAX_MESSAGE_BYTES,
                    timeout=aiohttp.ClientWSTimeout(ws_close=self.handshake_timeout),
                )
            except (aiohttp.ClientError, OSError, TimeoutError):
                ws = None
            if ws is not None:
                relay = via == "relay"
                try:
                    hello = await self._handshake(ws, "relay" if relay else "node")
                except HandshakeError as e:
                    self._note_handshake_failure(f"{via}:{target}", e)
                except (ConnectionError, RuntimeError, aiohttp.ClientError):
                    pass
                else:
                    attempt = 0
                    node_id = node_id or ("" if relay else hello.node_id)
                    key = f"relay:{target}" if relay else hello.node_id
                    await self._run_link(ws, hello, via, key, dialer=self.ident.node_id)
                await ws.close()
            attempt += 1
            delay = min(self.reconnect_max, self.reconnect_base * 2 ** min(attempt - 1, 16))
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def _handshake(self, ws, expect_role: str):
        return await handshake(
            ws,
            self.ident,
            self.room,
            self.key,
            timeout=self.handshake_timeout,
            model=self.model,
            backend=self.backend,
            name=self.name,
            expect_role=expect_role,
        )

    def _note_handshake_failure(self, key: str, e: HandshakeError) -> None:
        if e.reason == "same_identity":
            self.log(f"peer {key}: {printable(str(e))}")
        self._reject(key, e.reason)

    async def _serve_ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=self.heartbeat, max_msg_size=MAX_MESSAGE_BYTES)
        await ws.prepare(request)
        try:
            hello = await self._handshake(ws, "node")
        except HandshakeError as e:
            self._note_handshake_failure(f"ip:{request.remote}", e)
            return ws
        except (ConnectionError, RuntimeError):
            return ws
        with self._lock:
            via = "lan" if hello.node_id in self._lan else "manual"
        await self._run_link(ws, hello, via, hello.node_id, dialer=hello.node_id)
        return ws

    async def _run_link(self, ws, hello: Hello, via: str, key: str, dialer: str) -> None:
        """Register an authenticated link, read it until it closes, then forget it."""
        relay = key.startswith("relay:")
        st = self._stat(key, hello if not relay else None, via)
        if not relay and st.muted_until > time.time():
            await ws.send_bytes(make_bye("muted", "too many rejected messages; try later."))
            return
        old = self._links.get(key)
        if old is not None:
            keep_new = dialer == min(self.ident.node_id, hello.node_id) and old.dialer != dialer
            loser = old if keep_new else None
            if loser is None:
                await ws.send_bytes(make_bye("duplicate_connection", "already connected."))
                return
            await loser.ws.close()
        link = _Link(key, hello, via, dialer, ws, Outbox(ws, self.queue_limit))
        with self._lock:
            self._links[key] = link
            st.connected, st.last_seen = True, time.time()
        self._notify()
        if not relay:
            self.log(f"peer {hello.name} ({hello.node_id[:8]}) connected via {via}")
        try:
            while not ws.closed:
                try:
                    msg = await read_message(ws)
                except ProtocolError as e:
                    if self._reject(key, e.reason):
                        await ws.send_bytes(make_bye("muted", "too many rejected messages."))
                        break
                    continue
                if isinstance(msg, Closed):
                    if msg.reason:
                        self._reject(key, msg.reason)
                    break
                with self._lock:
                    st.last_seen = time.time()
                if isinstance(msg, Bye):
                    if msg.reason == "same_identity":
                        self.log(f"peer {hello.name}: {printable(msg.message)}")
                    break
                if isinstance(msg, Rollouts):
                    if self._on_rollouts(msg, key, via="relay" if relay else via):
                        await ws.send_bytes(make_bye("muted", "too many rejected messages."))
                        break
                else:
                    if self._reject(key, "unexpected_message"):
                        break
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass
        finally:
            link.outbox.close()
            link.closed.set()
            if self._links.get(key) is link:
                with self._lock:
                    del self._links[key]
                    st.connected = False
                self._notify()
                if not relay:
                    self.log(f"peer {hello.name} ({hello.node_id[:8]}) disconnected")
            await ws.close()

    def _on_rollouts(self, msg: Rollouts, route: str, via: str) -> bool:
        """Verify and deliver one batch; True when the route should be dropped (muted)."""
        relay = route.startswith("relay:")
        if not relay and msg.sender != route:
            return self._reject(route, "wrong_sender")
        if msg.sender == self.ident.node_id:
            return False  # our own batch, echoed
        sender_st = self._stats.get(msg.sender)
        now = time.time()
        if sender_st and sender_st.muted_until > now:
            with self._lock:
                self.counters["dropped_muted"] += 1
            return False
        if sender_st and not self.book.rate_ok(sender_st, now, self.max_batches_per_minute):
            # a flood of even valid batches must not crowd out the other peers
            return self._reject(msg.sender, "rate_limited") and not relay
        try:
            batch = self.verifier.verify(msg, route)
        except ProtocolError as e:
            who = route if (relay and e.reason in _ROUTE_REASONS) else msg.sender
            if relay and who != route:
                self._stat(who, None, "relay")
            muted = self._reject(who, e.reason)
            return muted and who == route
        if batch is None:
            with self._lock:
                self.counters["duplicate"] += 1
            self._notify()
            return False
        st = self._stat(msg.sender, None, via)
        with self._lock:
            st.last_seen = time.time()
            st.received += batch.groups
            st.accepted += batch.groups
            self._inbox.append((msg.sender, batch.payload))
            while len(self._inbox) > self.inbox_limit:
                self._inbox.popleft()
                self.counters["inbox_dropped"] += 1
            self.counters["delivered"] += 1
        self._notify()
        return False

    def _stat(self, key: str, hello: Hello | None, via: str) -> PeerStats:
        return self.book.stat(key, hello, via)

    def _reject(self, key: str, reason: str) -> bool:
        return self.book.reject(key, reason)


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")
