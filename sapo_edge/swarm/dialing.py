"""Dialing out (a part of network.py's NetworkTransport; what it links goes to link_life.py's
LinkTable): one dial loop per manual peer or relay, and one per LAN node id over the addresses mDNS advertises for it
(adverts found and lost); backoff with jitter, cut short when the laptop wakes up; and one dial:
connect, handshake, then run the link to its end (link_life.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..data.addresses import split_host
from .handshake import HandshakeError
from .handshake import handshake as run_handshake
from .link_life import LinkTable, send_bye
from .netcore import NetCore
from .peer import MAX_FRAME_BYTES
from .resume import GapWatch
from .routes import ip_route, relay_route

# a peer that hangs up with these at once refused us: dialing it again waits longer each time
# (a removed laptop redialing at the base rate kept every member's handshakes busy)
REFUSED = ("removed", "muted")

MAX_LAN_DIALS = 32  # dial loops for LAN adverts; a failing one makes room for a new advert
MAX_CANDIDATES = 4  # addresses remembered per advertised node id
RESUME_GAP_S = 3.0  # the loop stood still this long (asleep, stopped): re-dial at once


@dataclass
class LanDial:
    task: asyncio.Task | None
    candidates: list[str]  # HOST:PORT, the most recently advertised first
    failures: int = 0
    said_goodbye: bool = False  # an mDNS goodbye came: believed once a dial fails


class Dialer:
    """A node's dialing out; see the module docstring. Loop-confined, except `lan` (read under
    `core.lock`). Links it authenticates go to `table` (link_life.py); `port()` is the port this
    node listens on (advertised by mDNS); `spawn` runs a task the network cancels when it stops."""

    def __init__(
        self,
        core: NetCore,
        table: LinkTable,
        *,
        port: Callable[[], int],
        spawn: Callable[[Any], asyncio.Task],
        heartbeat: float,
        handshake_timeout: float,
        reconnect_base: float,
        reconnect_max: float,
        mdns_interfaces: list[str] | None,
    ) -> None:
        self.core, self.table, self.port, self._spawn = core, table, port, spawn
        self.heartbeat, self.handshake_timeout = heartbeat, handshake_timeout
        self.reconnect_base, self.reconnect_max = reconnect_base, reconnect_max
        self.mdns_interfaces = mdns_interfaces  # e.g. ["127.0.0.1"] in tests; None = all
        self.lan: set[str] = set()  # node ids that mDNS currently shows in our room
        self.dials: dict[str, asyncio.Task] = {}  # manual/relay target -> dial loop
        self.lan_dials: dict[str, LanDial] = {}  # node id -> dial loop over its addresses
        self.watch = GapWatch(tick=1.0)  # notices the laptop waking up (see _watch_resume)
        self.wake = asyncio.Event()  # set (and replaced) when the laptop wakes up
        self.session: aiohttp.ClientSession | None = None
        self.discovery: Any = None
        self.stopping = False  # an advert heard while discovery closes starts no dial loop

    # ----------------------------------------------------------------- start and stop
    async def start(self, manual: list[str], relay: str, mdns: bool) -> None:
        """On the network's loop, once it listens: dial the manual peers and the relay, browse
        and advertise on the LAN (mdns), and watch for the laptop waking up."""
        self._spawn(self._watch_resume())
        self.session = aiohttp.ClientSession()
        for target in manual:
            self._dial(target, "manual")
        if relay:
            self._dial(relay, "relay")
        if mdns:
            self._spawn(self._start_discovery())

    async def stop(self) -> None:
        """Stop dialing and LAN discovery (links go on until the table closes them)."""
        self.stopping = True
        for t in self.dials.values():
            t.cancel()
        for d in self.lan_dials.values():
            self._cancel(d)
        if self.discovery is not None:
            await self.discovery.close()

    async def close_session(self) -> None:
        if self.session:
            await self.session.close()

    # ----------------------------------------------------------------- discovery
    async def _start_discovery(self) -> None:
        """Advertise and browse in the background: mDNS probing takes a second or two."""
        from .discovery import LanDiscovery

        disc = LanDiscovery(
            self.core.ident.node_id,
            self.core.keys.lan_id,
            self.port(),
            self.core.model,
            on_found=self.on_found,
            on_lost=self.on_lost,
            log=lambda text: self.core.log(text),
            on_event=self.core.notify,
            interfaces=self.mdns_interfaces,
            addresses=self.mdns_interfaces,
        )
        self.discovery = disc
        try:
            await disc.start()
        except OSError as e:
            self.core.log(f"LAN discovery is off ({e}); use --peer HOST:PORT or --relay.")
            self.discovery = None

    def on_found(self, node_id: str, host: str, port: int) -> None:
        """An advert in our room: remember the address and keep one dial loop per node id."""
        if node_id == self.core.ident.node_id or self.stopping:
            return
        target = f"{host}:{port}"
        self.core.trace("advert", peer=node_id, at=target, linked=node_id in self.table.links)
        with self.core.lock:
            self.lan.add(node_id)
        link = self.table.links.get(node_id)
        if link is not None and link.via == "manual":  # it dialed us first: it is on our LAN
            link.via = "lan"
            with self.core.lock:
                self.core.book.stats[node_id].via = "lan"
        dial = self.lan_dials.get(node_id)
        if dial is not None:  # a new address for a known id: tried next (it may be the real one)
            dial.said_goodbye = False
            if target in dial.candidates:
                dial.candidates.remove(target)
            dial.candidates.insert(0, target)
            del dial.candidates[MAX_CANDIDATES:]
            return
        if len(self.lan_dials) >= MAX_LAN_DIALS:
            worst = max(self.lan_dials, key=lambda k: self.lan_dials[k].failures)
            if self.lan_dials[worst].failures < 2:
                self.core.counters["lan_dials_full"] += 1
                return
            self._cancel(self.lan_dials.pop(worst))
        entry = LanDial(None, [target])
        self.lan_dials[node_id] = entry
        entry.task = asyncio.get_running_loop().create_task(self._lan_dial_loop(node_id, entry))

    def on_lost(self, node_id: str) -> None:
        """An mDNS goodbye for this id. Anyone on the LAN can send one (unsigned), so it does
        not end the dial loop at once: the loop stops the next time a dial fails. A peer that
        really left is forgotten after one refused dial; a live one spoofed away is redialed
        when its link drops, as before."""
        self.core.trace("advert_gone", peer=node_id)
        dial = self.lan_dials.get(node_id)
        if dial is not None:
            dial.said_goodbye = True
            self.core.counters["lan_goodbyes"] += 1
        with self.core.lock:
            self.lan.discard(node_id)

    @staticmethod
    def _cancel(dial: LanDial) -> None:
        if dial.task is not None:
            dial.task.cancel()

    async def _lan_dial_loop(self, node_id: str, entry: LanDial) -> None:
        """Dial the first candidate address; a failing one goes to the back, so a newly
        advertised address (put first by on_found) is tried next."""
        while True:
            link = self.table.links.get(node_id)
            if link is not None:  # already linked (maybe they dialed us): wait until it drops
                await link.closed.wait()
                await asyncio.sleep(0)  # never spin on a link that is still being forgotten
                continue
            await self._wait_unmuted(node_id)
            target = entry.candidates[0]
            if node_id in self.core.book.removed:  # the class's host removed it: no dial
                await self._backoff(16)
                continue
            peer, bye = await self._dial_once(target, "lan", node_id)
            if peer and bye not in REFUSED:
                entry.failures = 0
                if bye == "duplicate_connection":
                    await self.table.wait_link(node_id)
                continue
            entry.failures += 1
            if entry.said_goodbye:  # it said goodbye and does not answer: it left
                if self.lan_dials.get(node_id) is entry:
                    del self.lan_dials[node_id]
                self.core.notify()
                return
            if entry.candidates and entry.candidates[0] == target:
                entry.candidates.append(entry.candidates.pop(0))
            self.core.notify()

            await self._backoff(entry.failures)

    # ----------------------------------------------------------------- dialing
    def _dial(self, target: str, via: str) -> None:
        self.dials[f"{via}:{target}"] = asyncio.get_running_loop().create_task(
            self._dial_loop(target, via)
        )

    async def _dial_loop(self, target: str, via: str) -> None:
        failures = 0
        node_id = ""
        while True:
            link = self.table.links.get(node_id) if node_id else None
            if link is not None:
                await link.closed.wait()
                await asyncio.sleep(0)
                continue
            if node_id:
                await self._wait_unmuted(node_id)
            got, bye = await self._dial_once(target, via, "")
            if got:
                node_id = got if via != "relay" else ""
            if got and bye not in REFUSED:
                failures = 0
                if node_id and bye == "duplicate_connection":
                    await self.table.wait_link(node_id)
            else:
                failures += 1
            await self._backoff(max(failures, 1))

    async def _wait_unmuted(self, node_id: str) -> None:
        muted = self.core.book.stats.get(node_id)
        if muted and muted.muted_until > time.time():
            await asyncio.sleep(muted.muted_until - time.time())

    async def _backoff(self, failures: int) -> None:
        delay = min(self.reconnect_max, self.reconnect_base * 2 ** min(failures - 1, 16))
        await self._nap(delay * random.uniform(0.5, 1.0))

    async def _nap(self, seconds: float) -> None:
        """Sleep, cut short when the laptop wakes up (_on_resume)."""
        wake = self.wake
        try:
            async with asyncio.timeout(seconds):
                await wake.wait()
        except TimeoutError:
            pass

    async def _dial_once(self, target: str, via: str, expect_id: str) -> tuple[str, str]:
        """Connect, handshake and run one link to its end; the peer's node id ('' on failure)
        and the reason of its goodbye ('' when it said none).
        Every step has a deadline: an address that accepts and then stalls costs seconds."""
        self.core.trace("dial", at=target, via=via, expect=expect_id)
        url = target if "://" in target else f"ws://{target}"
        if not url.rstrip("/").endswith("/ws"):
            url = url.rstrip("/") + "/ws"
        host, _port = split_host(url.split("://", 1)[1].split("/", 1)[0])
        addr = ip_route(host)
        relay = via == "relay"
        assert self.session is not None
        try:
            async with asyncio.timeout(self.handshake_timeout):
                ws = await self.session.ws_connect(
                    url,
                    heartbeat=self.heartbeat,
                    max_msg_size=MAX_FRAME_BYTES,
                    compress=0,
                    timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
                )
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            with self.core.lock:
                self.core.counters["dial_failed"] += 1
            self.core.trace("dial_failed", at=target, exc=type(e).__name__)
            self.core.notify()
            return "", ""
        try:
            session = await run_handshake(
                ws,
                self.core.ident,
                self.core.keys.relay_id if relay else self.core.keys.lan_id,
                b"" if relay else self.core.keys.link_psk,
                initiator=True,
                timeout=self.handshake_timeout,
                expect_role="relay" if relay else "node",
                info=self.core.info(),
            )
        except HandshakeError as e:
            self.core.trace("handshake_failed", at=target, reason=e.reason)
            self.core.note_handshake_failure(addr, e)
            await ws.close()
            return "", ""
        except (ConnectionError, RuntimeError, aiohttp.ClientError) as e:
            self.core.trace("handshake_failed", at=target, exc=type(e).__name__)
            await ws.close()
            return "", ""
        peer_id = session.hello.node_id
        if expect_id and peer_id != expect_id:  # the advert lied about whose address this is
            self.core.reject(addr, "wrong_node")
            await send_bye(session, ws, "wrong_node", "you are not the node advertised here.")
            return "", ""
        key = relay_route(target) if relay else peer_id
        link = await self.table.run_link(
            ws, session, via, key, dialer=self.core.ident.node_id, addr=addr
        )
        return peer_id, link.bye if link is not None else ""

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
        with self.core.lock:
            self.core.counters["resumed"] += 1
        self.core.log(f"woke up after {gap:.0f} s away: re-dialing peers now")
        self.core.trace("resume", gap=round(gap, 1), links=len(self.table.links))
        wake, self.wake = self.wake, asyncio.Event()
        wake.set()  # every backoff in progress ends now
        if gap > 1.5 * self.heartbeat:  # peers stopped hearing our pongs: those links are dead
            stale = list(self.table.links.values())
            for link in stale:
                self.core.trace("close_stale", peer=link.key)
            # at once: closing a dead link waits for the close timeout, one per peer in a row
            # would keep a class's last peers waiting
            await asyncio.gather(*(link.ws.close() for link in stale), return_exceptions=True)
        self.core.notify()
