"""One link's life, for the link layer (links.py puts it together with dialing.py): an
authenticated link registered under its peer's key, read frame by frame until it closes, retired
without losing a frame when both sides dialed at once, and the peer's queue held HOLD_S for its
next link.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..data.textsafe import clean
from .handshake import KIND_MESSAGE, KIND_SEALED, LinkBroken, Session
from .identity import Identity
from .peer import Closed, Outbox, read_raw
from .peerbook import PeerBook, PeerStats
from .protocol import Bye, ProtocolError, make_bye, parse_message

# how long a peer's queue waits for a new link after one ends (a replaced or dropped link):
# batches published meanwhile go on the next link instead of being lost
HOLD_S = 15.0


@dataclass
class Link:
    key: str  # peer node id, or "relay:URL"
    session: Session
    via: str
    dialer: str  # node id of the side that opened the connection
    ws: Any
    addr: str  # "ip:ADDR": where frames that fail authentication are charged
    outbox: Outbox  # the peer's queue: sends on this link while it is the registered one
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    retiring: bool = False  # we said "duplicate_connection" on it: read it until the peer does
    bye: str = ""  # the reason of the peer's goodbye, once read
    deadline: asyncio.Task | None = None  # closes a retiring link whose peer does not answer

    @property
    def node_id(self) -> str:
        return self.session.hello.node_id

    @property
    def name(self) -> str:
        return clean(self.session.auth.name, 64)

    async def send(self, kind: int, data: bytes) -> None:
        await self.session.channel.send(kind, data)


class LinkLife:
    """The one-link half of LinkLayer (mixed in); see the module docstring."""

    # how the log names a link's path ("connected via ..."); a class's student names a dialed
    # address the host's (classroom/join.py)
    via_words: dict[str, str] = {"manual": "its address (--peer)"}

    # provided by LinkLayer (links.py)
    ident: Identity
    book: PeerBook
    log: Callable[[str], None]
    counters: Counter
    handshake_timeout: float
    queue_limit: int
    _lock: Any
    _links: dict[str, Link]
    _link_up: dict[str, asyncio.Event]
    _outboxes: dict[str, Outbox]
    _held: dict[str, asyncio.TimerHandle]
    _notify: Callable[[], None]
    _trace: Callable[..., None]
    _reject: Callable[[str, str], bool]
    _spawn: Callable[[Any], asyncio.Task]

    # ----------------------------------------------------------------- one link
    def _queue_all(self, kind: int, data: bytes) -> None:
        """Queue a frame for every peer: linked ones, and ones whose link ended less than
        HOLD_S ago (it goes on their next link)."""
        for outbox in self._outboxes.values():
            outbox.put(kind, data)

    def _outbox(self, key: str) -> Outbox:
        outbox = self._outboxes.get(key)
        if outbox is None:
            outbox = self._outboxes[key] = Outbox(None, None, self.queue_limit)
        return outbox

    def _hold(self, key: str, outbox: Outbox) -> None:
        """The key's link ended: keep its queue HOLD_S for the next link (not a relay's: what
        the relay misses while it is down is not sent twice), then let it go."""
        if key.startswith("relay:"):
            self._drop_outbox(key, outbox)
            return
        if (timer := self._held.pop(key, None)) is not None:
            timer.cancel()
        self._held[key] = asyncio.get_running_loop().call_later(HOLD_S, self._expire, key, outbox)

    def _expire(self, key: str, outbox: Outbox) -> None:
        self._held.pop(key, None)
        if outbox.owner is None and key not in self._links:
            self._drop_outbox(key, outbox)

    def _drop_outbox(self, key: str, outbox: Outbox) -> None:
        if self._outboxes.get(key) is outbox:
            del self._outboxes[key]
        outbox.close()

    async def _run_link(
        self, ws, session: Session, via: str, key: str, dialer: str, addr: str
    ) -> Link | None:
        """Register an authenticated link, read it until it closes, then forget it.

        Two links with one peer (both dialed at once): both sides keep the one dialed by the
        smaller node id (or, when one node dialed both, its newer one: it gave up the older).
        The other is retired without losing a frame: the peer's queue moves to the kept link
        first, then we say "duplicate_connection" on the retired one as our last frame on it,
        and read it until the peer says the same (or a deadline), delivering what it sent."""
        relay = key.startswith("relay:")
        st = self.book.stat(key, None if relay else session.auth, via, node_id=key)
        if not relay and st.muted_until > time.time():
            await send_bye(session, ws, "muted", "too many rejected messages; try later.")
            return None
        old = self._links.get(key)
        keep_new = True
        if old is not None:
            if relay:
                keep_new = False
            elif old.dialer != dialer:
                keep_new = dialer == min(self.ident.node_id, session.hello.node_id)
        self._trace(
            "link",
            peer=key,
            dialer=dialer,
            via=via,
            had=old.dialer if old is not None else "",
            keep=keep_new,
        )
        outbox = self._outbox(key)
        link = Link(key, session, via, dialer, ws, addr, outbox)
        if not keep_new:
            if relay:
                await send_bye(session, ws, "duplicate_connection", "already connected.")
                return None
            await self._retire(link)
            await self._read_link(link, st)
            link.closed.set()
            return link
        with self._lock:
            self._links[key] = link
            st.connected, st.last_seen = True, time.time()
        if old is not None:
            await outbox.detach()  # no frame of ours is on its way on the old link now
        outbox.attach(session.channel.send, lambda: ws.closed, link)
        if (ev := self._link_up.pop(key, None)) is not None:
            ev.set()
        self._notify()
        if not relay:
            self.log(f"peer {link.name} ({key[:8]}) connected via {self.via_words.get(via, via)}")
        if old is not None:
            await self._retire(old)
        try:
            await self._read_link(link, st)
        finally:
            if outbox.owner is link:
                await outbox.detach()
            if self._links.get(key) is link:
                with self._lock:
                    del self._links[key]
                    st.connected = False
                self._hold(key, outbox)
                self._notify()
                self._trace("unlinked", peer=key, bye=link.bye)
                if not relay:
                    self.log(f"peer {link.name} ({key[:8]}) disconnected")
            link.closed.set()  # after it left _links: a dial loop waiting on it dials again
        return link

    async def _retire(self, link: Link) -> None:
        """Say "duplicate_connection" on a link we stop sending on (our last frame on it), and
        close it if the peer does not say the same within the handshake timeout."""
        if link.retiring:
            return
        link.retiring = True
        with self._lock:
            self.counters["links_retired"] += 1
        self._trace("retire", peer=link.key, dialer=link.dialer)
        try:
            await link.send(KIND_MESSAGE, make_bye("duplicate_connection", "already connected."))
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            await link.ws.close()
            return

        async def deadline() -> None:
            await asyncio.sleep(self.handshake_timeout)
            await link.ws.close()

        link.deadline = self._spawn(deadline())

    async def _read_link(self, link: Link, st: PeerStats) -> None:
        try:
            while not link.ws.closed:
                if await self._read_frame(link, st):
                    break
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass
        finally:
            if link.deadline is not None:
                link.deadline.cancel()
            try:
                await link.ws.close()
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                pass  # already gone

    async def _read_frame(self, link: Link, st: PeerStats) -> bool:
        """Read and handle one frame; True when the link must end."""
        raw = await read_raw(link.ws)
        if isinstance(raw, Closed):
            if raw.reason == "no_pong":  # asleep or off the Wi-Fi: counted, never muted
                self.book.reject(link.key, raw.reason, mute=False)
            elif raw.reason:  # transport-level junk: nobody proved they sent it
                self._reject(link.addr, raw.reason)
            return True
        if isinstance(raw, str):
            self._reject(link.addr, "bad_frame")
            return True
        try:
            kind, data = link.session.channel.open(raw)
        except LinkBroken:  # not from the authenticated peer: drop the link, blame the address
            self._reject(link.addr, "bad_frame")
            return True
        with self._lock:
            st.last_seen = time.time()
        if kind == KIND_SEALED:
            if self._on_sealed(link, data):
                await send_bye(link.session, link.ws, "muted", "too many rejected messages.")
                return True
            return False
        if kind != KIND_MESSAGE:
            return await self._refuse(link, "unknown_type")
        try:
            msg = parse_message(data)
        except ProtocolError as e:
            return await self._refuse(link, e.reason)
        if isinstance(msg, Bye):
            link.bye = msg.reason
            if msg.reason == "same_identity":
                self.log(f"peer {link.name}: {clean(msg.message, 300)}")
            if msg.reason == "duplicate_connection" and not link.retiring:
                # the peer keeps another link to us: our queue waits for it (HOLD_S); our own
                # goodbye, after our last frame here, lets the peer stop reading this one
                if link.outbox.owner is link:
                    await link.outbox.detach()
                await self._retire(link)
            return True
        return await self._refuse(link, "unexpected_message")

    async def _refuse(self, link: Link, reason: str) -> bool:
        """The authenticated peer sent something bad: charge it; True when now muted."""
        if self._reject(link.key, reason):
            await send_bye(link.session, link.ws, "muted", "too many rejected messages.")
            return True
        return False

    def _on_sealed(self, link: Link, data: bytes) -> bool:
        raise NotImplementedError


async def send_bye(session: Session, ws, reason: str, message: str) -> None:
    """Say goodbye (a reason, a message) as our last frame on a link, then close it."""
    try:
        await session.channel.send(KIND_MESSAGE, make_bye(reason, message))
    except (ConnectionError, RuntimeError, aiohttp.ClientError):
        pass
    await ws.close()
