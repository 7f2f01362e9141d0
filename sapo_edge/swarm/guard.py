"""Limits before work, at the TCP level (before any HTTP is parsed): a cap on connections in
total, a cap on connections still unauthenticated (handshakes in flight) in total and per IP (one
is dropped to make room: the oldest of everyone for the total; for the per-IP cap, the newcomer's
own address's oldest socket that never sent a byte, or its oldest, so idle sockets from one
address, old or freshly opened, cannot keep its next newcomer out), a cap on
authenticated links per IP (checked when a link authenticates: a class behind one NAT is many
links from one address), a deadline from accept to an authenticated link, a byte cap before
authentication and a per-IP byte budget. Also: the open-file limit raised where allowed, and asyncio's accept-error
log rate-limited (EMFILE must not write megabytes of log).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class GuardLimits:
    connections_total: int = 512  # also capped by the open-file limit (see effective_total)
    connections_per_ip: int = 16  # authenticated links from one address (see promote)
    pending_total: int = 64  # not yet authenticated: the oldest is dropped when full
    pending_per_ip: int = 8  # the same per address: its oldest socket that never sent a byte
    idle_grace: float = 0.5  # is dropped once it is this old (a dialer sends its request at
    # once; an idle socket never does), else the address's oldest
    pending_grace: float = 2.0  # once it is this old (younger: a handshake under way, and the
    # newcomer is refused instead, so a crowd behind one NAT cannot keep evicting itself)
    deadline: float = 10.0  # seconds from accept to an authenticated link
    preauth_bytes: int = 16 << 10  # HTTP upgrade + hello + auth fit in far less
    ip_bytes_per_minute: int = 128 << 20


@dataclass(eq=False)
class _Conn:
    ip: str
    transport: Any
    since: float
    promoted: bool = False
    bytes: int = 0
    timer: Any = None


@dataclass
class _Budget:
    start: float = 0.0
    used: int = 0


class ConnectionGuard:
    """Admits, times and meters the connections of one listening socket (one event loop)."""

    def __init__(
        self, limits: GuardLimits, on_reject: Callable[[str, str], None] | None = None
    ) -> None:
        self.limits = limits
        self.total_cap = effective_total(limits.connections_total)
        self.on_reject = on_reject or (lambda _ip, _reason: None)
        self.conns: dict[Any, _Conn] = {}  # transport -> connection
        self.pending: OrderedDict[_Conn, None] = OrderedDict()  # oldest first
        self.per_ip: Counter = Counter()
        self.pending_ip: Counter = Counter()
        self.links_ip: Counter = Counter()  # authenticated links per address
        self.budgets: OrderedDict[str, _Budget] = OrderedDict()
        self.counters: Counter = Counter()  # accepted, refused:REASON, evicted, deadline, ...
        self.clock: Callable[[], float] = time.monotonic  # the age of pending connections

    # ------------------------------------------------------------------ asyncio side
    def protocol(self, inner: asyncio.Protocol) -> asyncio.Protocol:
        return _Guarded(self, inner)

    def _admit(self, ip: str, transport: Any) -> _Conn | None:
        lim = self.limits
        self.counters["accepted"] += 1
        if len(self.conns) >= self.total_cap:
            self._reject(ip, "refused:connections_total")
            return None
        now = self.clock()
        if self.pending_ip[ip] >= lim.pending_per_ip:  # make room: one of this address's goes
            victim = self._stalled(ip, now)
            if victim is None:
                self._reject(ip, "refused:pending_per_ip")
                return None
            self._evict(victim)
        if len(self.pending) >= lim.pending_total:  # make room: drop the oldest handshake
            self._evict(next(iter(self.pending)))
        conn = _Conn(ip, transport, now)
        self.conns[transport] = conn
        self.per_ip[ip] += 1
        self.pending[conn] = None
        self.pending_ip[ip] += 1
        loop = asyncio.get_running_loop()
        conn.timer = loop.call_later(lim.deadline, self._deadline, conn)
        return conn

    def _stalled(self, ip: str, now: float) -> _Conn | None:
        """The socket of `ip` a newcomer may take the place of: its oldest that never sent a
        byte once that is `idle_grace` old (an attacker opening an idle socket every 0.1 s kept
        every slot younger than `pending_grace`, and the address's honest newcomers were
        refused), else its oldest once that is `pending_grace` old; None while all are
        handshakes under way (a socket that sent its request waits on us: it is never the
        idle one, however slow this machine is to answer)."""
        lim = self.limits
        mine = [c for c in self.pending if c.ip == ip]  # oldest first
        idle = next((c for c in mine if c.bytes == 0), None)
        if idle is not None and now - idle.since >= lim.idle_grace:
            return idle
        return mine[0] if now - mine[0].since >= lim.pending_grace else None

    def _evict(self, conn: _Conn) -> None:
        self._reject(conn.ip, "evicted")
        conn.transport.abort()
        self._forget_pending(conn)

    def _forget_pending(self, conn: _Conn) -> None:
        if conn in self.pending:
            del self.pending[conn]
            self.pending_ip[conn.ip] -= 1
            if self.pending_ip[conn.ip] <= 0:
                del self.pending_ip[conn.ip]
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None

    def _deadline(self, conn: _Conn) -> None:
        if not conn.promoted and conn.transport in self.conns:
            self._reject(conn.ip, "deadline")
            conn.transport.abort()

    def _charge(self, conn: _Conn, n: int) -> bool:
        """Count n bytes from this connection; False when it must be cut."""
        conn.bytes += n
        if not conn.promoted and conn.bytes > self.limits.preauth_bytes:
            self._reject(conn.ip, "too_large")
            return False
        b = self.budgets.get(conn.ip)
        now = time.monotonic()
        if b is None:
            b = self.budgets[conn.ip] = _Budget(now)
            while len(self.budgets) > 4096:
                self.budgets.popitem(last=False)
        self.budgets.move_to_end(conn.ip)
        if now - b.start > 60.0:
            b.start, b.used = now, 0
        b.used += n
        if b.used > self.limits.ip_bytes_per_minute:
            self._reject(conn.ip, "over_budget")
            return False
        return True

    def _release(self, conn: _Conn) -> None:
        self._forget_pending(conn)
        if self.conns.pop(conn.transport, None) is not None:
            self.per_ip[conn.ip] -= 1
            if self.per_ip[conn.ip] <= 0:
                del self.per_ip[conn.ip]
            if conn.promoted:
                self.links_ip[conn.ip] -= 1
                if self.links_ip[conn.ip] <= 0:
                    del self.links_ip[conn.ip]

    def _reject(self, ip: str, reason: str) -> None:
        self.counters[reason] += 1
        self.on_reject(ip, reason)

    # ------------------------------------------------------------------ handler side
    def promote(self, transport: Any) -> bool:
        """The connection authenticated: no more deadline or pre-auth byte cap. False (counted
        as refused:connections_per_ip) when its address already holds `connections_per_ip`
        authenticated links: the caller then ends it."""
        conn = self.conns.get(transport)
        if conn is None:
            return True  # gone already (or not through this guard): the caller sees it closed
        if conn.promoted:
            return True
        self._forget_pending(conn)
        if self.links_ip[conn.ip] >= self.limits.connections_per_ip:
            self._reject(conn.ip, "refused:connections_per_ip")
            return False
        conn.promoted = True
        self.links_ip[conn.ip] += 1
        return True

    def stats(self) -> dict[str, int]:
        return {"connections": len(self.conns), "pending": len(self.pending)}


class _Guarded(asyncio.Protocol):
    """Wraps aiohttp's protocol: refused connections never reach HTTP parsing."""

    def __init__(self, guard: ConnectionGuard, inner: Any) -> None:
        self.guard, self.inner, self.conn = guard, inner, None

    def connection_made(self, transport: Any) -> None:
        peer = transport.get_extra_info("peername")
        ip = str(peer[0]) if peer else "?"
        self.conn = self.guard._admit(ip, transport)
        if self.conn is None:
            transport.abort()
            return
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.conn is None:
            return
        if not self.guard._charge(self.conn, len(data)):
            self.conn.transport.abort()
            return
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.conn is not None else None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.conn is None:
            return
        self.guard._release(self.conn)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.inner.resume_writing()


class GuardedSite(web.TCPSite):
    """A TCPSite whose connections pass the guard before aiohttp sees a byte."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard):
        super().__init__(runner, host, port)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        self._server = await loop.create_server(
            lambda: self.guard.protocol(server()),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
        )

    def stop_listening(self) -> None:
        """Accept no new connection; those open stay (aiohttp's stop() differs between versions:
        some wait there for every handler)."""
        if self._server is not None:
            self._server.close()

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]


# --- process-wide ---------------------------------------------------------------------------


def raise_fd_limit(want: int = 8192) -> int:
    """Raise the soft open-file limit towards `want` (never above the hard limit); returns the
    limit now in force, or 0 where the platform has no `resource` module (Windows)."""
    try:
        import resource
    except ImportError:
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def effective_total(wanted: int) -> int:
    """At most half the open-file limit for inbound connections: the rest stays for dials,
    files and checkpoints (on macOS the default is only 256)."""
    limit = raise_fd_limit()
    if limit <= 0:
        return wanted
    return min(wanted, max(8, limit // 2 - 32))


class _RateLimit(logging.Filter):
    """Lets one accept-error record through per `every` seconds and counts the rest."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__()
        self.every, self.last, self.suppressed = every, -1e9, 0

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "accept" not in text and "Too many open files" not in text:
            return True
        now = time.monotonic()
        if now - self.last < self.every:
            self.suppressed += 1
            return False
        self.last = now
        if self.suppressed:
            record.msg = f"{record.msg} ({self.suppressed} more like it suppressed)"
            record.args = ()
            self.suppressed = 0
        return True


ACCEPT_LOG_FILTER = _RateLimit()


def quiet_accept_errors() -> None:
    """Install the rate limit on asyncio's logger (once)."""
    logger = logging.getLogger("asyncio")
    if ACCEPT_LOG_FILTER not in logger.filters:
        logger.addFilter(ACCEPT_LOG_FILTER)
