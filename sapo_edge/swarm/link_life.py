"""A node's links (a part of network.py's NetworkTransport; listener.py and dialing.py hand it
the links they authenticate): each registered under its peer's key, read frame by frame until it
closes, retired without losing a frame when both sides dialed at once, and the peer's queue held
HOLD_S for its next link.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..data.textsafe import clean
from .handshake import KIND_MESSAGE, KIND_SEALED, LinkBroken, Session
from .netcore import NetCore
from .peer import Closed, Outbox, read_raw
from .peerbook import PeerStats
from .protocol import Bye, ProtocolError, Rekey, make_bye, parse_message
from .routes import is_relay

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


class LinkTable:
    """A node's links, one per peer key, and each peer's queue; see the module docstring.
    Loop-confined, except `links` (read under `core.lock`). What arrives in a sealed frame goes
    to `on_sealed(link, data)` (True: the sender is now muted, end the link); `spawn` runs a
    task owned by the network's loop."""

    def __init__(
        self,
        core: NetCore,
        *,
        handshake_timeout: float,
        queue_limit: int,
        on_sealed: Callable[[Link, bytes], bool],
        spawn: Callable[[Any], asyncio.Task],
        first_words: Callable[[str], bytes | None] = lambda _key: None,
        on_rekey: Callable[[str, Rekey], bool] = lambda _key, _msg: False,
    ) -> None:
        self.core, self.handshake_timeout, self.queue_limit = core, handshake_timeout, queue_limit
        self.on_sealed, self.spawn = on_sealed, spawn
        # a class's room secret (room_secret.py): what goes first on a new link with a key, and
        # a peer's new secret (False: not heeded, the peer is charged)
        self.first_words, self.on_rekey = first_words, on_rekey
        # how the log names a link's path ("connected via ..."); a class's student names a
        # dialed address the host's (classroom/join.py)
        self.via_words: dict[str, str] = {"manual": "its address (--peer)"}
        self.links: dict[str, Link] = {}
        self.outboxes: dict[str, Outbox] = {}  # key -> its queue, kept HOLD_S past a link
        self.link_up: dict[str, asyncio.Event] = {}  # set when a link for that key registers
        self.held: dict[str, asyncio.TimerHandle] = {}  # key -> when its idle queue is dropped

    # ----------------------------------------------------------------- one link
    def queue_all(self, kind: int, data: bytes) -> None:
        """Queue a frame for every peer: linked ones, and ones whose link ended less than
        HOLD_S ago (it goes on their next link)."""
        for outbox in self.outboxes.values():
            outbox.put(kind, data)

    async def wait_link(self, key: str) -> None:
        """After a link of ours ended: if the peer said it keeps another link to us (both sides
        dialed at once), wait until that one registers here before dialing again (bounded)."""
        if key in self.links:
            return
        ev = self.link_up.setdefault(key, asyncio.Event())
        try:
            async with asyncio.timeout(self.handshake_timeout):
                await ev.wait()
        except TimeoutError:
            pass
        finally:
            if self.link_up.get(key) is ev and not ev.is_set():
                del self.link_up[key]

    async def close_all(self) -> None:
        """At shutdown: say goodbye on every link and close it, and drop every queue."""
        for timer in self.held.values():
            timer.cancel()
        for link in list(self.links.values()):
            try:
                await link.send(KIND_MESSAGE, make_bye("shutdown", "the node is stopping."))
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                pass
            await link.ws.close()
        for outbox in self.outboxes.values():
            outbox.close()

    def _outbox(self, key: str) -> Outbox:
        outbox = self.outboxes.get(key)
        if outbox is None:
            outbox = self.outboxes[key] = Outbox(None, None, self.queue_limit)
        return outbox

    def _hold(self, key: str, outbox: Outbox) -> None:
        """The key's link ended: keep its queue HOLD_S for the next link (not a relay's: what
        the relay misses while it is down is not sent twice), then let it go."""
        if is_relay(key):
            self._drop_outbox(key, outbox)
            return
        if (timer := self.held.pop(key, None)) is not None:
            timer.cancel()
        self.held[key] = asyncio.get_running_loop().call_later(HOLD_S, self._expire, key, outbox)

    def _expire(self, key: str, outbox: Outbox) -> None:
        self.held.pop(key, None)
        if outbox.owner is None and key not in self.links:
            self._drop_outbox(key, outbox)

    def _drop_outbox(self, key: str, outbox: Outbox) -> None:
        if self.outboxes.get(key) is outbox:
            del self.outboxes[key]
        outbox.close()

    async def run_link(
        self, ws, session: Session, via: str, key: str, dialer: str, addr: str
    ) -> Link | None:
        """Register an authenticated link, read it until it closes, then forget it.

        Two links with one peer (both dialed at once): both sides keep the one dialed by the
        smaller node id (or, when one node dialed both, its newer one: it gave up the older).
        The other is retired without losing a frame: the peer's queue moves to the kept link
        first, then we say "duplicate_connection" on the retired one as our last frame on it,
        and read it until the peer says the same (or a deadline), delivering what it sent."""
        relay = is_relay(key)
        st = self.core.book.stat(key, None if relay else session.auth, via, node_id=key)
        if not relay and st.muted_until > time.time():
            await send_bye(session, ws, "muted", "too many rejected messages; try later.")
            return None
        if key in self.core.book.removed:
            self.core.count("links_refused_removed")
            await send_bye(session, ws, "removed", "the class's host removed this member.")
            return None
        old = self.links.get(key)
        keep_new = True
        if old is not None:
            if relay:
                keep_new = False
            elif old.dialer != dialer:
                keep_new = dialer == min(self.core.ident.node_id, session.hello.node_id)
        self.core.trace(
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
        with self.core.lock:
            self.links[key] = link
            st.connected, st.last_seen = True, time.time()
        if old is not None:
            await outbox.detach()  # no frame of ours is on its way on the old link now
        if (words := self.first_words(key)) is not None:
            outbox.put_first(KIND_MESSAGE, words)  # before what was queued under newer keys
        outbox.attach(session.channel.send, lambda: ws.closed, link)
        if (ev := self.link_up.pop(key, None)) is not None:
            ev.set()
        self.core.notify()
        if not relay:
            self.core.log(
                f"peer {link.name} ({key[:8]}) connected via {self.via_words.get(via, via)}"
            )
        if old is not None:
            await self._retire(old)
        try:
            await self._read_link(link, st)
        finally:
            if outbox.owner is link:
                await outbox.detach()
            if self.links.get(key) is link:
                with self.core.lock:
                    del self.links[key]
                    st.connected = False
                self._hold(key, outbox)
                self.core.notify()
                self.core.trace("unlinked", peer=key, bye=link.bye)
                if not relay:
                    self.core.log(f"peer {link.name} ({key[:8]}) disconnected")
            link.closed.set()  # after it left _links: a dial loop waiting on it dials again
        return link

    async def _retire(self, link: Link) -> None:
        """Say "duplicate_connection" on a link we stop sending on (our last frame on it), and
        close it if the peer does not say the same within the handshake timeout."""
        if link.retiring:
            return
        link.retiring = True
        with self.core.lock:
            self.core.counters["links_retired"] += 1
        self.core.trace("retire", peer=link.key, dialer=link.dialer)
        try:
            await link.send(KIND_MESSAGE, make_bye("duplicate_connection", "already connected."))
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            await link.ws.close()
            return

        async def deadline() -> None:
            await asyncio.sleep(self.handshake_timeout)
            await link.ws.close()

        link.deadline = self.spawn(deadline())

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
                self.core.book.reject(link.key, raw.reason, mute=False)
            elif raw.reason:  # transport-level junk: nobody proved they sent it
                self.core.reject(link.addr, raw.reason)
            return True
        if isinstance(raw, str):
            self.core.reject(link.addr, "bad_frame")
            return True
        try:
            kind, data = link.session.channel.open(raw)
        except LinkBroken:  # not from the authenticated peer: drop the link, blame the address
            self.core.reject(link.addr, "bad_frame")
            return True
        with self.core.lock:
            st.last_seen = time.time()
        if kind == KIND_SEALED:
            if self.on_sealed(link, data):
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
            self.core.on_bye(link.key, msg.reason)
            if msg.reason == "same_identity":
                self.core.log(f"peer {link.name}: {clean(msg.message, 300)}")
            if msg.reason == "duplicate_connection" and not link.retiring:
                # the peer keeps another link to us: our queue waits for it (HOLD_S); our own
                # goodbye, after our last frame here, lets the peer stop reading this one
                if link.outbox.owner is link:
                    await link.outbox.detach()
                await self._retire(link)
            return True
        if isinstance(msg, Rekey) and self.on_rekey(link.key, msg):
            return False
        return await self._refuse(link, "unexpected_message")

    async def _refuse(self, link: Link, reason: str) -> bool:
        """The authenticated peer sent something bad: charge it; True when now muted."""
        if self.core.reject(link.key, reason):
            await send_bye(link.session, link.ws, "muted", "too many rejected messages.")
            return True
        return False


async def send_bye(session: Session, ws, reason: str, message: str) -> None:
    """Say goodbye (a reason, a message) as our last frame on a link, then close it."""
    try:
        await session.channel.send(KIND_MESSAGE, make_bye(reason, message))
    except (ConnectionError, RuntimeError, aiohttp.ClientError):
        pass
    await ws.close()
