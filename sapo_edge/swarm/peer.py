"""One websocket to a peer or the relay: the hello/auth handshake, reading messages with every
failure mapped to a reason code, and a bounded send queue that drops the oldest when full.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web

from .identity import Identity
from .protocol import (
    Auth,
    Hello,
    Message,
    ProtocolError,
    check_auth,
    make_auth,
    make_bye,
    make_hello,
    new_nonce,
    parse_message,
)

WS = web.WebSocketResponse | aiohttp.ClientWebSocketResponse


@dataclass(frozen=True)
class Closed:
    """The websocket ended; `reason` is None for an orderly close, else a reason code."""

    reason: str | None


async def read_raw(ws: WS, timeout: float | None = None) -> bytes | str | Closed:
    """The next data frame, or Closed(reason) with the transport failure mapped to a code."""
    try:
        msg = await ws.receive(timeout=timeout)
    except TimeoutError:
        return Closed("timeout")
    if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
        return msg.data
    if msg.type == WSMsgType.ERROR:
        exc = msg.data
        if isinstance(exc, aiohttp.WebSocketError):
            if exc.code == WSCloseCode.MESSAGE_TOO_BIG:
                return Closed("too_large")
            if exc.code == WSCloseCode.INVALID_TEXT:
                return Closed("bad_utf8")
            return Closed("ws_error")
        if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
            return Closed("no_pong")
        return Closed("ws_error")
    if ws.close_code == WSCloseCode.MESSAGE_TOO_BIG:
        return Closed("too_large")
    return Closed(None)


async def read_message(ws: WS, timeout: float | None = None) -> Message | Closed:
    """The next parsed message; a malformed one raises ProtocolError (the link stays open)."""
    raw = await read_raw(ws, timeout)
    if isinstance(raw, Closed):
        return raw
    return parse_message(raw)


class HandshakeError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def handshake(
    ws: WS,
    ident: Identity,
    room: str,
    key: bytes,
    *,
    timeout: float,
    role: str = "node",
    model: str = "",
    backend: str = "",
    name: str | None = None,
    expect_role: str | None = None,
) -> Hello:
    """Both sides: send hello (with a fresh nonce), read the peer's, prove identity and room.

    The peer's room proof is checked only when both sides are nodes (a relay knows no secret).
    Raises HandshakeError(reason) after telling the peer why with a bye.
    """
    nonce = new_nonce()
    await ws.send_bytes(
        make_hello(ident, room, nonce, role=role, model=model, backend=backend, name=name)
    )
    hello = await _expect(ws, Hello, timeout)
    if expect_role and hello.role != expect_role:
        await _fail(ws, "bad_role", f"expected a {expect_role}, got a {hello.role}.")
    if hello.node_id == ident.node_id:
        await _fail(
            ws,
            "same_identity",
            f"both nodes present id {ident.node_id[:12]}: one copied the other's identity.key; "
            "give one node its own SAPO_EDGE_HOME (or delete its identity.key) and restart it.",
        )
    if hello.room != room and role != "relay":
        await _fail(ws, "wrong_room", "the peer is in a different room.")
    await ws.send_bytes(make_auth(ident, hello.nonce, room, key))
    auth = await _expect(ws, Auth, timeout)
    try:
        check_auth(auth, hello, nonce, room, key if role == hello.role == "node" else None)
    except ProtocolError as e:
        await _fail(ws, e.reason, str(e))
    return hello


async def _expect(ws: WS, kind: type, timeout: float):
    try:
        msg = await read_message(ws, timeout)
    except ProtocolError as e:
        await _fail(ws, e.reason, f"during handshake: {e}")
    if isinstance(msg, Closed):
        raise HandshakeError(msg.reason or "closed", "the peer closed during the handshake.")
    if not isinstance(msg, kind):
        reason = msg.reason if hasattr(msg, "reason") else "unexpected_message"
        text = getattr(msg, "message", f"expected {kind.__name__.lower()}")
        await _fail(ws, reason, text, send=not hasattr(msg, "reason"))
    return msg


async def _fail(ws: WS, reason: str, message: str, send: bool = True):
    if send and not ws.closed:
        try:
            await ws.send_bytes(make_bye(reason, message))
        except (ConnectionError, RuntimeError):
            pass
    await ws.close()
    raise HandshakeError(reason, message)


class Outbox:
    """A bounded queue of messages for one websocket, sent by its own task: a slow peer only
    loses its oldest messages (counted in `dropped`), it never blocks the sender."""

    def __init__(self, ws: WS, limit: int) -> None:
        self.ws, self.limit = ws, limit
        self.queue: deque[bytes] = deque()
        self.dropped = 0
        self.sent = 0
        self._ready = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def put(self, data: bytes) -> None:
        if len(self.queue) >= self.limit:
            self.queue.popleft()
            self.dropped += 1
        self.queue.append(data)
        self._ready.set()

    async def _run(self) -> None:
        try:
            while not self.ws.closed:
                await self._ready.wait()
                self._ready.clear()
                while self.queue and not self.ws.closed:
                    await self.ws.send_bytes(self.queue.popleft())
                    self.sent += 1
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass  # the reader notices the closed socket and cleans up

    def close(self) -> None:
        self.task.cancel()
