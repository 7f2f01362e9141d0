"""Members' stats on the sending side, a part of network.py's NetworkTransport: this node's
recent figures signed, sealed and queued for every link (and the NATS route), its progress paced
to one message every PROGRESS_EVERY seconds, and the host's goodbye sent at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .batches import seal
from .handshake import KIND_SEALED
from .intake import Intake
from .link_life import LinkTable
from .nats_transport import NatsRoute
from .netcore import NetCore
from .progress import PROGRESS_EVERY, PROGRESS_REPEAT, Progress, ProgressSender
from .stats import RoundStats, make_progress, make_stats
from .stats_intake import VerifiedStats


class StatsChannel:
    """Publish this node's recent figures to every link of `table` (and the NATS route), and
    hand what members send (through `intake`) to `on_stats`. `loop()`: the network's loop, None
    before it starts (nothing is sent then)."""

    def __init__(
        self,
        core: NetCore,
        table: LinkTable,
        intake: Intake,
        nats: NatsRoute | None,
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        *,
        progress_every: float = PROGRESS_EVERY,
        progress_repeat: float = PROGRESS_REPEAT,
    ) -> None:
        self.core, self.table, self.intake, self.nats, self.loop = core, table, intake, nats, loop
        self.progress_every, self.progress_repeat = progress_every, progress_repeat
        self._progress_sender: ProgressSender | None = None

    @property
    def on_stats(self) -> Callable[[VerifiedStats], None] | None:
        return self.intake.stats.on_stats

    @on_stats.setter
    def on_stats(self, handler: Callable[[VerifiedStats], None] | None) -> None:
        """Set before start(): over NATS, only a node with a handler hears the stats subject."""
        self.intake.stats.on_stats = handler
        self.intake.stats.log = lambda text: self.core.log(text)
        if self.nats is not None:
            self.nats.classnet.want_stats = handler is not None

    def hear_host(
        self, handler: Callable[[VerifiedStats], None], host_id: str, removed: Callable[[], None]
    ) -> None:
        """A class's student: `handler` hears every verified stats or progress message that
        reaches this laptop (it heeds its host's); over NATS only the room's end subject, not
        each member's stats. `removed()`: the host `host_id` refused this laptop's link as
        removed (a laptop away when the teacher removed it: the word is sealed under keys it no
        longer holds). Set before start()."""
        self.intake.stats.on_stats = handler  # a failing handler says so, in the network's log
        self.intake.stats.log = lambda text: self.core.log(text)
        if self.nats is not None:
            self.nats.classnet.want_end = True
        if host_id:
            self.core.on_bye = lambda key, reason: (
                removed() if key == host_id and reason == "removed" else None
            )

    def publish_stats(self, rounds: RoundStats | list[RoundStats]) -> None:
        """Sign, seal and queue this node's recent figures for every link (never waits)."""
        msg, stats_id = make_stats(self.core.ident, self.core.keys, rounds)
        if (loop := self.loop()) is not None:
            loop.call_soon_threadsafe(self._broadcast_stats, seal(self.core.keys, msg), stats_id)

    def publish_progress(self, progress: Progress) -> None:
        """Queue what this node is doing now for the class (any thread, never waits): at most one
        message every PROGRESS_EVERY seconds goes out, the newest state (progress.py)."""
        if (loop := self.loop()) is not None:
            loop.call_soon_threadsafe(self._offer_progress, progress)

    def _offer_progress(self, progress: Progress) -> None:
        sender = self._progress_sender
        if sender is None:
            sender = self._progress_sender = ProgressSender(
                self._send_progress,
                asyncio.get_running_loop().call_later,
                every=self.progress_every,
                repeat=self.progress_repeat,
            )
        sender.offer(progress)

    def send_goodbye(self, progress: Progress, timeout: float = 3.0) -> int:
        """Send `progress` (the host's "ended") at once on every link and NATS's end subject, and
        wait (at most `timeout`) until each link's socket (and the NATS server) has taken it;
        returns the links that took it (NATS counts as one)."""
        loop = self.loop()
        if loop is None or not loop.is_running():
            return 0
        fut = asyncio.run_coroutine_threadsafe(self._goodbye(self._sealed(progress), timeout), loop)
        try:
            return fut.result(timeout + 2.0)
        except Exception:  # noqa: BLE001 - a closing loop: nobody to tell
            return 0

    def announce(self, progress: Progress) -> None:
        """Send `progress` (the host's join code in force) at once on every link and NATS's end
        subject, as the goodbye goes, without waiting for it (any thread). It is sealed now,
        under the room's keys in force as it is said (a removal's word, under the keys the
        removed laptop holds: room_secret.py replaces them after it)."""
        loop = self.loop()
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(self._goodbye(self._sealed(progress), 3.0), loop)

    def _sealed(self, progress: Progress) -> bytes:
        msg, stats_id = make_progress(self.core.ident, self.core.keys, progress)
        self.intake.stats.verifier.remember(self.core.ident.node_id, stats_id, "self")
        return seal(self.core.keys, msg)

    async def _goodbye(self, sealed: bytes, timeout: float) -> int:
        waits = []
        for link in self.table.links.values():
            link.outbox.put(KIND_SEALED, sealed)
            waits.append((link, link.outbox.sent + len(link.outbox.queue)))
        deadline = time.monotonic() + timeout
        nats = self.nats  # and the NATS end subject, which students hear
        said = nats is not None and await nats.classnet.say_goodbye(sealed, timeout)
        while time.monotonic() < deadline and any(
            o.outbox.sent < n and not o.ws.closed for o, n in waits
        ):
            await asyncio.sleep(0.02)
        return sum(o.outbox.sent >= n for o, n in waits) + int(said)

    def _send_progress(self, progress: Progress) -> None:
        msg, stats_id = make_progress(self.core.ident, self.core.keys, progress)
        self._broadcast_stats(seal(self.core.keys, msg), stats_id)

    def _broadcast_stats(self, sealed: bytes, stats_id: str) -> None:
        self.intake.stats.verifier.remember(self.core.ident.node_id, stats_id, "self")
        self.table.queue_all(KIND_SEALED, sealed)
        if self.nats is not None:  # to whoever hosts a class view
            self.nats.publish(sealed, subject=self.nats.classnet.stats_subject)
        self.core.count("stats_published")
