"""Listening (a part of network.py's NetworkTransport): the node's web server behind the
connection guard, its handshake with each caller, and the authenticated links it hands to
link_life.py's LinkTable. Extra routes (a class's /admit) come from the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
from aiohttp import web

from ..data.addresses import bind_address
from .guard import ConnectionGuard, GuardedSite, GuardLimits, quiet_accept_errors
from .handshake import HandshakeError
from .handshake import handshake as run_handshake
from .link_life import LinkTable, send_bye
from .netcore import NetCore
from .peer import MAX_FRAME_BYTES
from .routes import ip_route


class Listener:
    """See the module docstring. `is_lan(node_id)`: whether LAN discovery shows that node (its
    link is then said to come by the LAN); `routes(app)` adds the caller's routes."""

    def __init__(
        self,
        core: NetCore,
        table: LinkTable,
        *,
        listen: str,
        heartbeat: float,
        handshake_timeout: float,
        guard: GuardLimits | None,
        is_lan: Callable[[str], bool],
        routes: Callable[[web.Application], None],
    ) -> None:
        self.core, self.table, self.listen = core, table, listen
        self.heartbeat, self.handshake_timeout = heartbeat, handshake_timeout
        self.is_lan, self.routes = is_lan, routes
        self.guard = ConnectionGuard(
            guard or GuardLimits(deadline=handshake_timeout + 2.0), on_reject=self._guard_reject
        )
        self.port = 0
        self.runner: web.AppRunner | None = None
        self.site: GuardedSite | None = None
        # websockets being served (handshake and link): closed at shutdown before the server
        # waits for its handlers (a handshake in progress would hold the stop up to its timeout,
        # and aiohttp's cancel of such a handler can raise InvalidStateError at exit)
        self.serving: set[web.WebSocketResponse] = set()

    async def start(self) -> None:
        """Listen (on the network's loop); a busy port gives way to a free one, said in the log."""
        quiet_accept_errors()
        app = web.Application()
        app.router.add_get("/ws", self._serve_ws)
        app.router.add_get("/healthz", _healthz)
        self.routes(app)
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self.runner.setup()
        host, port = bind_address(self.listen)  # '[::]:7744' binds '::' (was '[::]')
        try:
            site = GuardedSite(self.runner, host, port, self.guard)
            await site.start()
        except OSError as e:
            if int(port) == 0:
                raise
            self.core.log(f"port {port} is busy ({e.strerror}); listening on a free port instead.")
            site = GuardedSite(self.runner, host, 0, self.guard)
            await site.start()
        self.port, self.site = site.bound_port, site
        self.core.trace("listening", port=self.port)

    def stop_listening(self) -> None:
        """No new callers: a peer redialing now would start a handshake."""
        if self.site is not None:
            self.site.stop_listening()

    async def close(self) -> None:
        """After the links closed: end the handshakes in progress, then the server."""
        # their handlers end now, before aiohttp's cleanup would cancel them
        if left := [ws for ws in self.serving if not ws.closed]:
            self.core.count("closed_at_stop", len(left))
            await asyncio.gather(*(ws.close() for ws in left), return_exceptions=True)
        if self.runner:
            await self.runner.cleanup()

    def _guard_reject(self, ip: str, reason: str) -> None:
        self.core.count(f"guard:{reason}")
        self.core.notify()

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
        self.serving.add(ws)
        self.core.notify()
        try:
            return await self._serve_prepared(request, ws)
        finally:
            self.serving.discard(ws)

    async def _serve_prepared(
        self, request: web.Request, ws: web.WebSocketResponse
    ) -> web.StreamResponse:
        addr, core = ip_route(str(request.remote)), self.core
        try:
            session = await run_handshake(
                ws,
                core.ident,
                core.keys.lan_id,
                core.keys.link_psk,
                initiator=False,
                timeout=self.handshake_timeout,
                expect_role="node",
                info=core.info(),
                older=core.ring.older_psks,  # keys a host replaced, for a while (keyring.py)
            )
        except HandshakeError as e:
            core.trace("handshake_failed", came_from=addr, reason=e.reason)
            core.note_handshake_failure(addr, e)
            return ws
        except (ConnectionError, RuntimeError) as e:
            core.trace("handshake_failed", came_from=addr, exc=type(e).__name__)
            return ws
        if not self.guard.promote(request.transport):  # its address holds its ceiling
            await send_bye(session, ws, "busy", "too many links from this address.")
            return ws
        node_id = session.hello.node_id
        with core.lock:
            via = "lan" if self.is_lan(node_id) else "manual"
        await self.table.run_link(ws, session, via, node_id, dialer=node_id, addr=addr)
        return ws


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")
