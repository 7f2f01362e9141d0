"""`sapo-edge relay`: forwards signed rollout batches among the nodes of a room, for nodes that
cannot see each other on a LAN. It cannot forge (batches are signed end to end) and it bounds
everything: message size, per-node rate, connections per IP and in total, per-client queues.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from .identity import Identity
from .peer import Closed, HandshakeError, Outbox, _expect, _fail, read_message
from .protocol import (
    MAX_MESSAGE_BYTES,
    Auth,
    Bye,
    Hello,
    ProtocolError,
    Rollouts,
    check_auth,
    check_signed,
    dump_message,
    make_auth,
    make_bye,
    make_hello,
    new_nonce,
)


@dataclass(frozen=True)
class RelayLimits:
    max_message_bytes: int = MAX_MESSAGE_BYTES
    messages_per_minute: int = 120  # per node
    bytes_per_minute: int = 32 << 20  # per node
    connections_per_ip: int = 16
    connections_total: int = 1024
    queue_limit: int = 64  # messages waiting for one slow client; the oldest is dropped
    heartbeat: float = 10.0
    handshake_timeout: float = 10.0
    reject_threshold: int = 20  # rejections per minute before a client is disconnected
    window_s: float = 300.0  # a batch older or newer than this is refused


@dataclass
class _Client:
    node_id: str
    name: str
    room: str
    ip: str
    ws: web.WebSocketResponse
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
        self.per_ip: Counter = Counter()
        self.connections = 0
        self.counters: Counter = Counter()  # forwarded, dropped, refused, rejected:REASON
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.changed = asyncio.Condition()

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/ws", self.serve_ws)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/stats", self.stats_view)
        return app

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

    async def _count(self, key: str) -> None:
        self.counters[key] += 1
        async with self.changed:
            self.changed.notify_all()

    async def serve_ws(self, request: web.Request) -> web.StreamResponse:
        ip = request.remote or "?"
        lim = self.limits
        if self.connections >= lim.connections_total or self.per_ip[ip] >= lim.connections_per_ip:
            await self._count("refused")
            return web.Response(status=503, text="too many connections; try later\n")
        self.connections += 1
        self.per_ip[ip] += 1
        ws = web.WebSocketResponse(heartbeat=lim.heartbeat, max_msg_size=lim.max_message_bytes)
        try:
            await ws.prepare(request)
            try:
                hello = await self._handshake(ws)
            except HandshakeError as e:
                await self._count(f"rejected:{e.reason}")
                return ws
            await self._serve_client(ws, hello, ip)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass
        finally:
            self.connections -= 1
            self.per_ip[ip] -= 1
            if not self.per_ip[ip]:
                del self.per_ip[ip]
            await ws.close()
        return ws

    async def _handshake(self, ws: web.WebSocketResponse) -> Hello:
        """The node speaks first; the relay answers in the node's room and checks its key."""
        t = self.limits.handshake_timeout
        hello = await _expect(ws, Hello, t)
        if hello.role != "node":
            await _fail(ws, "bad_role", "only nodes connect to a relay.")
        nonce = new_nonce()
        await ws.send_bytes(make_hello(self.ident, hello.room, nonce, role="relay", name="relay"))
        await ws.send_bytes(make_auth(self.ident, hello.nonce, hello.room, b""))
        auth = await _expect(ws, Auth, t)
        try:
            check_auth(auth, hello, nonce, hello.room, None)
        except ProtocolError as e:
            await _fail(ws, e.reason, str(e))
        return hello

    async def _serve_client(self, ws: web.WebSocketResponse, hello: Hello, ip: str) -> None:
        old = self.rooms.get(hello.room, {}).get(hello.node_id)
        if old is not None:  # the same key reconnected: the new connection wins
            await old.ws.send_bytes(make_bye("replaced", "a newer connection took over."))
            await old.ws.close()
        room = self.rooms.setdefault(hello.room, {})  # after the awaits: the room may be new
        client = _Client(
            hello.node_id, hello.name, hello.room, ip, ws, Outbox(ws, self.limits.queue_limit)
        )
        room[hello.node_id] = client
        async with self.changed:
            self.changed.notify_all()
        try:
            while not ws.closed:
                try:
                    msg = await read_message(ws)
                except ProtocolError as e:
                    if await self._reject(client, e.reason):
                        break
                    continue
                if isinstance(msg, Closed):
                    if msg.reason:
                        await self._reject(client, msg.reason)
                    break
                if isinstance(msg, Bye):
                    break
                if not isinstance(msg, Rollouts):
                    if await self._reject(client, "unexpected_message"):
                        break
                    continue
                reason = self._check(client, msg)
                if reason:
                    if await self._reject(client, reason):
                        break
                    continue
                await self._forward(client, msg)
        finally:
            client.outbox.close()
            if room.get(hello.node_id) is client:
                del room[hello.node_id]
                if not room and self.rooms.get(hello.room) is room:
                    del self.rooms[hello.room]
            async with self.changed:
                self.changed.notify_all()

    def _check(self, client: _Client, msg: Rollouts) -> str | None:
        if msg.sender != client.node_id:
            return "wrong_sender"
        try:
            body = check_signed(msg)
        except ProtocolError as e:
            return e.reason
        if body["room"] != client.room:
            return "wrong_room"
        if abs(time.time() - float(body["sent_at"])) > self.limits.window_s:
            return "expired"
        if body["id"] in self.seen:
            return "replay"
        now, size = time.monotonic(), len(msg.body)
        sent = client.sent
        while sent and sent[0][0] < now - 60.0:
            sent.popleft()
        if (
            len(sent) >= self.limits.messages_per_minute
            or sum(b for _, b in sent) + size > self.limits.bytes_per_minute
        ):
            return "rate_limited"
        sent.append((now, size))
        self.seen[body["id"]] = None
        while len(self.seen) > 100_000:
            self.seen.popitem(last=False)
        return None

    async def _forward(self, client: _Client, msg: Rollouts) -> None:
        data = dump_message(
            {
                "type": "rollouts",
                "sender": msg.sender,
                "public_key": msg.public_key.hex(),
                "body": msg.body,
                "signature": msg.signature.hex(),
                "mac": msg.mac.hex(),
            }
        )
        for other in self.rooms.get(client.room, {}).values():
            if other is not client:
                before = other.outbox.dropped
                other.outbox.put(data)
                self.counters["dropped"] += other.outbox.dropped - before
                self.counters["forwarded"] += 1
        async with self.changed:
            self.changed.notify_all()

    async def _reject(self, client: _Client, reason: str) -> bool:
        """Count; True when the client passed the rejection threshold and is disconnected."""
        await self._count(f"rejected:{reason}")
        client.reasons[reason] += 1
        now = time.monotonic()
        client.rejected.append(now)
        while client.rejected and client.rejected[0] < now - 60.0:
            client.rejected.popleft()
        if len(client.rejected) >= self.limits.reject_threshold:
            await self._count("disconnected")
            if not client.ws.closed:
                await client.ws.send_bytes(make_bye("muted", "too many rejected messages."))
            return True
        return False


def run_relay(host: str, port: int, limits: RelayLimits | None = None) -> None:
    relay = Relay(limits)
    print(f"sapo-edge relay on ws://{host}:{port}/ws (GET /healthz, /stats)")
    web.run_app(relay.make_app(), host=host, port=port, print=None)
