"""Dialing out, for the link layer (links.py puts it together with link_life.py): one dial loop
per manual peer or relay, and one per LAN node id over the addresses mDNS advertises for it
(adverts found and lost); backoff with jitter, cut short when the laptop wakes up; and one dial:
connect, handshake, then run the link to its end (link_life.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..data.addresses import split_host
from .handshake import HandshakeError, LocalInfo
from .handshake import handshake as run_handshake
from .identity import Identity
from .link_life import Link, send_bye
from .peer import MAX_FRAME_BYTES
from .peerbook import PeerStats
from .resume import GapWatch
from .roomkey import RoomKeys

MAX_LAN_DIALS = 32  # dial loops for LAN adverts; a failing one makes room for a new advert
MAX_CANDIDATES = 4  # addresses remembered per advertised node id
RESUME_GAP_S = 3.0  # the loop stood still this long (asleep, stopped): re-dial at once


@dataclass
class LanDial:
    task: asyncio.Task | None
    candidates: list[str]  # HOST:PORT, the most recently advertised first
    failures: int = 0
    said_goodbye: bool = False  # an mDNS goodbye came: believed once a dial fails


class Dialing:
    """The dialing half of LinkLayer (mixed in); see the module docstring."""

    # provided by LinkLayer (links.py) and LinkLife (link_life.py)
    ident: Identity
    keys: RoomKeys
    model: str
    port: int
    mdns_interfaces: list[str] | None
    heartbeat: float
    handshake_timeout: float
    reconnect_base: float
    reconnect_max: float
    log: Callable[[str], None]
    counters: Counter
    watch: GapWatch
    _lock: Any
    _stats: dict[str, PeerStats]
    _links: dict[str, Link]
    _link_up: dict[str, asyncio.Event]
    _lan: set[str]
    _dials: dict[str, asyncio.Task]
    _lan_dials: dict[str, LanDial]
    _wake: asyncio.Event
    _session: aiohttp.ClientSession | None
    _discovery: Any
    _notify: Callable[[], None]
    _trace: Callable[..., None]
    _reject: Callable[[str, str], bool]
    _info: Callable[[], LocalInfo]
    _note_handshake_failure: Callable[[str, HandshakeError], None]
    _run_link: Callable[..., Awaitable[Link | None]]

    # ----------------------------------------------------------------- discovery
    async def _start_discovery(self) -> None:
        """Advertise and browse in the background: mDNS probing takes a second or two."""
        from .discovery import LanDiscovery

        disc = LanDiscovery(
            self.ident.node_id,
            self.keys.lan_id,
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

    def _on_found(self, node_id: str, host: str, port: int) -> None:
        """An advert in our room: remember the address and keep one dial loop per node id."""
        if node_id == self.ident.node_id or getattr(self, "_stopping", False):
            return
        target = f"{host}:{port}"
        self._trace("advert", peer=node_id, at=target, linked=node_id in self._links)
        with self._lock:
            self._lan.add(node_id)
        link = self._links.get(node_id)
        if link is not None and link.via == "manual":  # it dialed us first: it is on our LAN
            link.via = "lan"
            with self._lock:
                self._stats[node_id].via = "lan"
        dial = self._lan_dials.get(node_id)
        if dial is not None:  # a new address for a known id: tried next (it may be the real one)
            dial.said_goodbye = False
            if target in dial.candidates:
                dial.candidates.remove(target)
            dial.candidates.insert(0, target)
            del dial.candidates[MAX_CANDIDATES:]
            return
        if len(self._lan_dials) >= MAX_LAN_DIALS:
            worst = max(self._lan_dials, key=lambda k: self._lan_dials[k].failures)
            if self._lan_dials[worst].failures < 2:
                self.counters["lan_dials_full"] += 1
                return
            self._cancel(self._lan_dials.pop(worst))
        entry = LanDial(None, [target])
        self._lan_dials[node_id] = entry
        entry.task = asyncio.get_running_loop().create_task(self._lan_dial_loop(node_id, entry))

    def _on_lost(self, node_id: str) -> None:
        """An mDNS goodbye for this id. Anyone on the LAN can send one (unsigned), so it does
        not end the dial loop at once: the loop stops the next time a dial fails. A peer that
        really left is forgotten after one refused dial; a live one spoofed away is redialed
        when its link drops, as before."""
        self._trace("advert_gone", peer=node_id)
        dial = self._lan_dials.get(node_id)
        if dial is not None:
            dial.said_goodbye = True
            self.counters["lan_goodbyes"] += 1
        with self._lock:
            self._lan.discard(node_id)

    @staticmethod
    def _cancel(dial: LanDial) -> None:
        if dial.task is not None:
            dial.task.cancel()

    async def _lan_dial_loop(self, node_id: str, entry: LanDial) -> None:
        """Dial the first candidate address; a failing one goes to the back, so a newly
        advertised address (put first by _on_found) is tried next."""
        while True:
            link = self._links.get(node_id)
            if link is not None:  # already linked (maybe they dialed us): wait until it drops
                await link.closed.wait()
                await asyncio.sleep(0)  # never spin on a link that is still being forgotten
                continue
            await self._wait_unmuted(node_id)
            target = entry.candidates[0]
            peer, bye = await self._dial_once(target, "lan", node_id)
            if peer:
                entry.failures = 0
                if bye == "duplicate_connection":
                    await self._wait_link(node_id)
                continue
            entry.failures += 1
            if entry.said_goodbye:  # it said goodbye and does not answer: it left
                if self._lan_dials.get(node_id) is entry:
                    del self._lan_dials[node_id]
                self._notify()
                return
            if entry.candidates and entry.candidates[0] == target:
                entry.candidates.append(entry.candidates.pop(0))
            self._notify()

            await self._backoff(entry.failures)

    # ----------------------------------------------------------------- dialing
    def _dial(self, target: str, via: str) -> None:
        self._dials[f"{via}:{target}"] = asyncio.get_running_loop().create_task(
            self._dial_loop(target, via)
        )

    async def _dial_loop(self, target: str, via: str) -> None:
        failures = 0
        node_id = ""
        while True:
            link = self._links.get(node_id) if node_id else None
            if link is not None:
                await link.closed.wait()
                await asyncio.sleep(0)
                continue
            if node_id:
                await self._wait_unmuted(node_id)
            got, bye = await self._dial_once(target, via, "")
            if got:
                failures = 0
                node_id = got if via != "relay" else ""
                if node_id and bye == "duplicate_connection":
                    await self._wait_link(node_id)
            else:
                failures += 1
            await self._backoff(max(failures, 1))

    async def _wait_unmuted(self, node_id: str) -> None:
        muted = self._stats.get(node_id)
        if muted and muted.muted_until > time.time():
            await asyncio.sleep(muted.muted_until - time.time())

    async def _backoff(self, failures: int) -> None:
        delay = min(self.reconnect_max, self.reconnect_base * 2 ** min(failures - 1, 16))
        await self._nap(delay * random.uniform(0.5, 1.0))

    async def _nap(self, seconds: float) -> None:
        """Sleep, cut short when the laptop wakes up (_on_resume)."""
        wake = self._wake
        try:
            async with asyncio.timeout(seconds):
                await wake.wait()
        except TimeoutError:
            pass

    async def _wait_link(self, key: str) -> None:
        """After a link of ours ended: if the peer said it keeps another link to us (both sides
        dialed at once), wait until that one registers here before dialing again (bounded)."""
        if key in self._links:
            return
        ev = self._link_up.setdefault(key, asyncio.Event())
        try:
            async with asyncio.timeout(self.handshake_timeout):
                await ev.wait()
        except TimeoutError:
            pass
        finally:
            if self._link_up.get(key) is ev and not ev.is_set():
                del self._link_up[key]

    async def _dial_once(self, target: str, via: str, expect_id: str) -> tuple[str, str]:
        """Connect, handshake and run one link to its end; the peer's node id ('' on failure)
        and the reason of its goodbye ('' when it said none).
        Every step has a deadline: an address that accepts and then stalls costs seconds."""
        self._trace("dial", at=target, via=via, expect=expect_id)
        url = target if "://" in target else f"ws://{target}"
        if not url.rstrip("/").endswith("/ws"):
            url = url.rstrip("/") + "/ws"
        host, _port = split_host(url.split("://", 1)[1].split("/", 1)[0])
        addr = f"ip:{host}"
        relay = via == "relay"
        assert self._session is not None
        try:
            async with asyncio.timeout(self.handshake_timeout):
                ws = await self._session.ws_connect(
                    url,
                    heartbeat=self.heartbeat,
                    max_msg_size=MAX_FRAME_BYTES,
                    compress=0,
                    timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
                )
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            with self._lock:
                self.counters["dial_failed"] += 1
            self._trace("dial_failed", at=target, exc=type(e).__name__)
            self._notify()
            return "", ""
        try:
            session = await run_handshake(
                ws,
                self.ident,
                self.keys.relay_id if relay else self.keys.lan_id,
                b"" if relay else self.keys.link_psk,
                initiator=True,
                timeout=self.handshake_timeout,
                expect_role="relay" if relay else "node",
                info=self._info(),
            )
        except HandshakeError as e:
            self._trace("handshake_failed", at=target, reason=e.reason)
            self._note_handshake_failure(addr, e)
            await ws.close()
            return "", ""
        except (ConnectionError, RuntimeError, aiohttp.ClientError) as e:
            self._trace("handshake_failed", at=target, exc=type(e).__name__)
            await ws.close()
            return "", ""
        peer_id = session.hello.node_id
        if expect_id and peer_id != expect_id:  # the advert lied about whose address this is
            self._reject(addr, "wrong_node")
            await send_bye(session, ws, "wrong_node", "you are not the node advertised here.")
            return "", ""
        key = f"relay:{target}" if relay else peer_id
        link = await self._run_link(ws, session, via, key, dialer=self.ident.node_id, addr=addr)
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
        with self._lock:
            self.counters["resumed"] += 1
        self.log(f"woke up after {gap:.0f} s away: re-dialing peers now")
        self._trace("resume", gap=round(gap, 1), links=len(self._links))
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()  # every backoff in progress ends now
        if gap > 1.5 * self.heartbeat:  # peers stopped hearing our pongs: those links are dead
            stale = list(self._links.values())
            for link in stale:
                self._trace("close_stale", peer=link.key)
            # at once: closing a dead link waits for the close timeout, one per peer in a row
            # would keep a class's last peers waiting
            await asyncio.gather(*(link.ws.close() for link in stale), return_exceptions=True)
        self._notify()
