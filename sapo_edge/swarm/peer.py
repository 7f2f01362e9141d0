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
    Bounded by count and by bytes (the frames themselves are shared between links).

    The queue can outlive a link: detach() stops sending (waiting for a frame already being
    sent, so nothing goes on the old link after it returns) and attach() points it at another
    link, which then gets what was queued meanwhile. A link that is replaced (two nodes that
    dialed each other at once) or drops for a moment loses nothing queued for its peer."""

    def __init__(
        self, send: Any = None, closed: Any = None, limit: int = 64, max_bytes: int = 32 << 20
    ) -> None:
        self._send, self._closed = send, closed or (lambda: False)  # async send(kind, data)
        self.limit, self.max_bytes = limit, max_bytes
        self.queue: deque[tuple[int, bytes]] = deque()
        self.bytes = 0
        self.dropped = 0
        self.sent = 0
        self.owner: Any = None  # the link it sends on now (link_life.py), None while detached
        self._ready = asyncio.Event()
        self._sending = asyncio.Lock()
        self.task = asyncio.get_running_loop().create_task(self._run())

    def put(self, kind: int, data: bytes) -> None:
        self.queue.append((kind, data))
        self.bytes += len(data)
        while len(self.queue) > self.limit or (self.bytes > self.max_bytes and len(self.queue) > 1):
            self.bytes -= len(self.queue.popleft()[1])
            self.dropped += 1
        self._ready.set()

    def put_first(self, kind: int, data: bytes) -> None:
        """Queue a frame ahead of what waits (a link's first words: room_secret.py)."""
        self.queue.appendleft((kind, data))
        self.bytes += len(data)
        self._ready.set()

    def attach(self, send: Any, closed: Any, owner: Any = None) -> None:
        """Send on another link from now on (what is queued goes first)."""
        self._send, self._closed, self.owner = send, closed, owner
        self._ready.set()

    async def detach(self) -> None:
        """Stop sending; returns once no frame is on its way on the current link."""
        async with self._sending:
            self._send, self.owner = None, None

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self.queue and self._send is not None and not self._closed():
                async with self._sending:
                    send = self._send
                    if send is None or self._closed() or not self.queue:
                        break
                    kind, data = self.queue.popleft()
                    self.bytes -= len(data)
                    try:
                        await send(kind, data)
                    except (ConnectionError, RuntimeError, aiohttp.ClientError):
                        # the reader notices the closed socket and cleans up; the frame was
                        # maybe sent, so it is not sent again (a receiver counts a repeat)
                        self._send, self.owner = None, None
                        break
                    self.sent += 1

    def close(self) -> None:
        self.task.cancel()
