"""`sapo-edge relay`: forwards sealed rollout batches among the nodes of a room, for nodes that
cannot see each other on a LAN. It knows no room key: it routes ciphertext by an opaque route id
and learns only sizes and timing; it cannot read, forge or inject (the nodes check seals and
signatures). It bounds everything: connections in total and handshakes per IP before any HTTP
is parsed, authenticated links per IP, handshake deadline and size, message size, per-node rate
and bytes, per-client queues.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from .guard import ConnectionGuard, GuardedSite, GuardLimits, quiet_accept_errors
from .handshake import KIND_MESSAGE, KIND_SEALED, HandshakeError, LinkBroken, Session, handshake
from .identity import Identity
from .peer import MAX_FRAME_BYTES, Closed, Outbox, read_raw
from .protocol import Bye, ProtocolError, known_reason, make_bye, parse_message


@dataclass(frozen=True)
class RelayLimits:
    max_message_bytes: int = MAX_FRAME_BYTES
    messages_per_minute: int = 120  # per node
    bytes_per_minute: int = 32 << 20  # per node
    # authenticated links from one address: a class behind one school NAT is one address
    # (pending handshakes per address are capped apart, at pending_per_ip)
    connections_per_ip: int = 256
    connections_total: int = 1024
    pending_total: int = 64  # handshakes in flight; the oldest is dropped to make room
    pending_per_ip: int = 8
    queue_limit: int = 64  # messages waiting for one slow client; the oldest is dropped
    heartbeat: float = 10.0
    handshake_timeout: float = 10.0
    reject_threshold: int = 20  # rejections per minute before a client is disconnected

    def guard(self) -> GuardLimits:
        return GuardLimits(
            connections_total=self.connections_total,
            connections_per_ip=self.connections_per_ip,
            pending_total=self.pending_total,
            pending_per_ip=self.pending_per_ip,
            deadline=self.handshake_timeout + 2.0,
        )


@dataclass
class _Client:
    node_id: str
    room: str
    ip: str
    ws: web.WebSocketResponse
    session: Session
    outbox: Outbox
    sent: deque = field(default_factory=deque)  # (time, bytes) of the last minute
    rejected: deque = field(default_factory=deque)
    reasons: Counter = field(default_factory=Counter)


class Relay:
    def __init__(
        self, limits: RelayLimits | None = None, log: Callable[[str], None] = print
    ) -> None:
        self.limits = limits or RelayLimits()
        self.ident = Identity.generate()
        self.log = log
        self.rooms: dict[str, dict[str, _Client]] = {}
        self.guard = ConnectionGuard(self.limits.guard(), on_reject=self._guard_reject)
        self.counters: Counter = Counter()  # forwarded, dropped, refused, rejected:REASON
        self.seen: OrderedDict[bytes, None] = OrderedDict()  # hashes of sealed boxes
        self.changed = asyncio.Condition()
        self._background: set[asyncio.Task] = set()

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/ws", self.serve_ws)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/stats", self.stats_view)
        return app

    def site(self, runner: web.BaseRunner, host: str, port: int) -> GuardedSite:
        """The listening socket, behind the relay's connection guard."""
        return GuardedSite(runner, host, port, self.guard)

    @property
    def connections(self) -> int:
        return len(self.guard.conns)

    def stats(self) -> dict:
        c = self.counters
        return {
            "rooms": len(self.rooms),
            "nodes": sum(len(r) for r in self.rooms.values()),
            "connections": self.connections,
            "messages_forwarded": c["forwarded"],
            "messages_dropped": c["dropped"],
            "connections_refused": c["refused"],
            "rejected": {k.split(":", 1)[1]: v for k, v in c.items() if k.startswith("rejected:")},
        }

    async def healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def stats_view(self, _request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    def _guard_reject(self, _ip: str, reason: str) -> None:
        self.counters["refused" if reason.startswith("refused:") else f"rejected:{reason}"] += 1
        task = asyncio.get_running_loop().create_task(self._notify())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _count(self, key: str) -> None:
        self.counters[key] += 1
        await self._notify()

    async def serve_ws(self, request: web.Request) -> web.StreamResponse:
        ip = request.remote or "?"
        lim = self.limits
        ws = web.WebSocketResponse(
            heartbeat=lim.heartbeat, max_msg_size=lim.max_message_bytes, compress=False, timeout=2.0
        )
        try:
            await ws.prepare(request)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            return web.Response(status=400)  # hung up first: aiohttp lets this write fail quietly
        try:
            try:  # the node speaks first; the relay answers on the node's route
                session = await handshake(
                    ws,
                    self.ident,
                    "",
                    b"",
                    initiator=False,
                    timeout=lim.handshake_timeout,
                    role="relay",
                    expect_role="node",
                )
            except HandshakeError as e:
                await self._count(f"rejected:{known_reason(e.reason)}")
                return ws
            if not self.guard.promote(request.transport):  # its address holds its ceiling
                await session.channel.send(
                    KIND_MESSAGE, make_bye("busy", "too many links from this address.")
                )
                return ws
            await self._serve_client(ws, session, ip)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass
        finally:
            await ws.close()
        return ws

    async def _serve_client(self, ws: web.WebSocketResponse, session: Session, ip: str) -> None:
        hello = session.hello
        old = self.rooms.get(hello.room, {}).get(hello.node_id)
        if old is not None:  # the same (authenticated) key reconnected: the new connection wins
            try:
                await old.session.channel.send(
                    KIND_MESSAGE, make_bye("replaced", "a newer connection took over.")
                )
            except (ConnectionError, RuntimeError):
                pass
            await old.ws.close()
        room = self.rooms.setdefault(hello.room, {})  # after the awaits: the room may be new
        outbox = Outbox(session.channel.send, lambda: ws.closed, self.limits.queue_limit)
        client = _Client(hello.node_id, hello.room, ip, ws, session, outbox)
        room[hello.node_id] = client
        await self._notify()
        try:
            while not ws.closed:
                if await self._read_one(client):
                    break
        finally:
            outbox.close()
            if room.get(hello.node_id) is client:
                del room[hello.node_id]
                if not room and self.rooms.get(hello.room) is room:
                    del self.rooms[hello.room]
            await self._notify()

    async def _read_one(self, client: _Client) -> bool:
        """Handle one frame from a client; True when its connection ends."""
        raw = await read_raw(client.ws)
        if isinstance(raw, Closed):
            if raw.reason:
                await self._reject(client, raw.reason)
            return True
        if isinstance(raw, str):
            await self._count("rejected:bad_frame")
            return True
        try:
            kind, data = client.session.channel.open(raw)
        except LinkBroken:  # not from the authenticated client: drop the connection
            await self._count("rejected:bad_frame")
            return True
        if kind == KIND_SEALED:
            reason = self._check(client, data)
            if reason:
                return await self._reject(client, reason)
            await self._forward(client, data)
            return False
        if kind != KIND_MESSAGE:
            return await self._reject(client, "unknown_type")
        try:
            msg = parse_message(data)
        except ProtocolError as e:
            return await self._reject(client, e.reason)
        if isinstance(msg, Bye):
            return True
        return await self._reject(client, "unexpected_message")

    def _check(self, client: _Client, sealed: bytes) -> str | None:
        digest = hashlib.sha256(sealed).digest()
        if digest in self.seen:
            return "replay"
        now, size = time.monotonic(), len(sealed)
        sent = client.sent
        while sent and sent[0][0] < now - 60.0:
            sent.popleft()
        if (
            len(sent) >= self.limits.messages_per_minute
            or sum(b for _, b in sent) + size > self.limits.bytes_per_minute
        ):
            return "rate_limited"
        sent.append((now, size))
        self.seen[digest] = None
        while len(self.seen) > 100_000:
            self.seen.popitem(last=False)
        return None

    async def _forward(self, client: _Client, sealed: bytes) -> None:
        for other in self.rooms.get(client.room, {}).values():
            if other is not client:
                before = other.outbox.dropped
                other.outbox.put(KIND_SEALED, sealed)
                self.counters["dropped"] += other.outbox.dropped - before
                self.counters["forwarded"] += 1
        await self._notify()

    async def _reject(self, client: _Client, reason: str) -> bool:
        """Count; True when the client passed the rejection threshold and is disconnected."""
        await self._count(f"rejected:{known_reason(reason)}")
        client.reasons[reason] += 1
        now = time.monotonic()
        client.rejected.append(now)
        while client.rejected and client.rejected[0] < now - 60.0:
            client.rejected.popleft()
        if len(client.rejected) >= self.limits.reject_threshold:
            await self._count("disconnected")
            if not client.ws.closed:
                try:
                    await client.session.channel.send(
                        KIND_MESSAGE, make_bye("muted", "too many rejected messages.")
                    )
                except (ConnectionError, RuntimeError):
                    pass
            return True
        return False


def run_relay(host: str, port: int, limits: RelayLimits | None = None) -> None:
    relay = Relay(limits)
    print(f"sapo-edge relay on ws://{host}:{port}/ws (GET /healthz, /stats)")

    async def main() -> None:
        quiet_accept_errors()
        runner = web.AppRunner(relay.make_app(), access_log=None)
        await runner.setup()
        await relay.site(runner, host, port).start()
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
