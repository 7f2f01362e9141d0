"""One websocket to a peer or the relay: reading frames with every transport failure mapped to a
reason code, and a bounded send queue (count and bytes) that drops the oldest when full.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web

from .protocol import MAX_MESSAGE_BYTES

WS = web.WebSocketResponse | aiohttp.ClientWebSocketResponse
# A websocket message after the handshake: one encrypted frame holding a sealed batch.
MAX_FRAME_BYTES = MAX_MESSAGE_BYTES + 256


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


class Outbox:
    """A bounded queue of frames for one link, sent by its own task through `send(kind, data)`:
    a slow peer only loses its oldest frames (counted in `dropped`), it never blocks the sender.
    Bounded by count and by bytes (the frames themselves are shared between links)."""

    def __init__(self, send: Any, closed: Any, limit: int, max_bytes: int = 32 << 20) -> None:
        self._send, self._closed = send, closed  # async send(kind, data); closed() -> bool
        self.limit, self.max_bytes = limit, max_bytes
        self.queue: deque[tuple[int, bytes]] = deque()
        self.bytes = 0
        self.dropped = 0
        self.sent = 0
        self._ready = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def put(self, kind: int, data: bytes) -> None:
        self.queue.append((kind, data))
        self.bytes += len(data)
        while len(self.queue) > self.limit or (self.bytes > self.max_bytes and len(self.queue) > 1):
            self.bytes -= len(self.queue.popleft()[1])
            self.dropped += 1
        self._ready.set()

    async def _run(self) -> None:
        try:
            while not self._closed():
                await self._ready.wait()
                self._ready.clear()
                while self.queue and not self._closed():
                    kind, data = self.queue.popleft()
                    self.bytes -= len(data)
                    await self._send(kind, data)
                    self.sent += 1
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass  # the reader notices the closed socket and cleans up

    def close(self) -> None:
        self.task.cancel()
