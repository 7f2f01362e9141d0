"""The class's services on the teacher's laptop, apart from its node: the relay (with GET /admit
when it is the class's own) and the projector page, on one asyncio loop in a thread of their
own; and the address a join code names by default.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable

from aiohttp import web

from ..swarm.admission import Admissions, serve_admission
from ..swarm.guard import ConnectionGuard, GuardedSite, GuardLimits, quiet_accept_errors
from ..swarm.loop_thread import run_service_loop
from ..swarm.relay import Relay, RelayLimits


class HostServices:
    """The relay (with GET /admit when it is the class's own) and the projector page, on one
    asyncio loop in a thread of their own."""

    def __init__(
        self,
        *,
        relay: bool,
        relay_host: str,
        relay_port: int,
        admissions: Admissions | None,
        page: Callable[[], web.Application] | None,
        web_host: str,
        web_port: int,
        log: Callable[[str], None],
    ) -> None:
        self.want_relay, self.relay_host, self.relay_port = relay, relay_host, relay_port
        self.admissions, self.page, self.log = admissions, page, log
        self.web_host, self.web_port = web_host, web_port
        self.relay: Relay | None = None
        self._runners: list[web.AppRunner] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 15.0) -> HostServices:
        self._thread = threading.Thread(target=self._main, name="sapo-host", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the class's relay and page did not start in time.")
        if self._error is not None:
            raise self._error
        return self

    def _main(self) -> None:
        run_service_loop(self)

    async def _serve(self, app: web.Application, host: str, port: int, guard) -> int:
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        try:
            site = GuardedSite(runner, host, port, guard)
            await site.start()
        except OSError as e:
            if port == 0 or e.errno != errno.EADDRINUSE:
                raise
            self.log(f"port {port} is busy; using a free port instead (the code carries it).")
            site = GuardedSite(runner, host, 0, guard)
            await site.start()
        return site.bound_port

    async def _startup(self) -> None:
        quiet_accept_errors()
        if self.want_relay:
            self.relay = Relay(RelayLimits(), log=self.log)
            app = self.relay.make_app()
            if self.admissions is not None:
                app.router.add_get("/admit", serve_admission(self.admissions, self.log))
            self.relay_port = await self._serve(
                app, self.relay_host, self.relay_port, self.relay.guard
            )
        if self.page is not None:
            guard = ConnectionGuard(GuardLimits(connections_per_ip=16, deadline=30.0))
            self.web_port = await self._serve(self.page(), self.web_host, self.web_port, guard)

    def close(self, timeout: float = 10.0) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return

        async def stop() -> None:
            for r in self._runners:
                await r.cleanup()

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout)
        except Exception:  # noqa: BLE001 - best effort; the loop stops regardless
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)


def lan_address() -> str:
    """The address to put in the code: this machine's first LAN address, else loopback."""
    from ..run.doctor import lan_addresses

    found = [a for a in lan_addresses() if ":" not in a] or lan_addresses()
    return found[0] if found else "127.0.0.1"
