"""Members' stats on the sending side, as a part of NetworkTransport (mixed in): this node's
recent figures signed, sealed and queued for every link (and the NATS route), its progress paced
to one message every PROGRESS_EVERY seconds, and the host's goodbye sent at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from .batches import seal
from .handshake import KIND_SEALED
from .identity import Identity
from .progress import PROGRESS_EVERY, PROGRESS_REPEAT, Progress, ProgressSender
from .roomkey import RoomKeys
from .stats import RoundStats, make_progress, make_stats
from .stats_intake import VerifiedStats


class StatsChannel:
    """The stats half of NetworkTransport (mixed in): publish this node's recent figures to
    every link (and the NATS route), and hand what members send to `on_stats`."""

    # provided by LinkLayer / NetworkTransport
    ident: Identity
    keys: RoomKeys
    counters: Any
    intake: Any
    nats: Any
    log: Callable[[str], None]
    _links: dict
    _lock: Any
    _queue_all: Callable[[int, bytes], None]
    _loop: Any

    @property
    def on_stats(self) -> Callable[[VerifiedStats], None] | None:
        return self.intake.stats.on_stats

    @on_stats.setter
    def on_stats(self, handler: Callable[[VerifiedStats], None] | None) -> None:
        """Set before start(): over NATS, only a node with a handler hears the stats subject."""
        self.intake.stats.on_stats, self.intake.stats.log = handler, self.log
        if self.nats is not None:  # set in NetworkTransport.__init__, before any caller
            self.nats.want_stats = handler is not None

    def publish_stats(self, rounds: RoundStats | list[RoundStats]) -> None:
        """Sign, seal and queue this node's recent figures for every link (never waits)."""
        msg, stats_id = make_stats(self.ident, self.keys, rounds)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._broadcast_stats, seal(self.keys, msg), stats_id)

    def publish_progress(self, progress: Progress) -> None:
        """Queue what this node is doing now for the class (any thread, never waits): at most one
        message every PROGRESS_EVERY seconds goes out, the newest state (progress.py)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._offer_progress, progress)

    def _offer_progress(self, progress: Progress) -> None:
        sender = getattr(self, "_progress_sender", None)
        if sender is None:
            sender = self._progress_sender = ProgressSender(
                self._send_progress,
                self._loop.call_later,
                every=getattr(self, "progress_every", PROGRESS_EVERY),
                repeat=getattr(self, "progress_repeat", PROGRESS_REPEAT),
            )
        sender.offer(progress)

    def send_goodbye(self, progress: Progress, timeout: float = 3.0) -> int:
        """Send `progress` (the host's "ended") at once on every link and NATS's end subject, and
        wait (at most `timeout`) until each link's socket (and the NATS server) has taken it;
        returns the links that took it (NATS counts as one)."""
        if self._loop is None or not self._loop.is_running():
            return 0
        fut = asyncio.run_coroutine_threadsafe(self._goodbye(progress, timeout), self._loop)
        try:
            return fut.result(timeout + 2.0)
        except Exception:  # noqa: BLE001 - a closing loop: nobody to tell
            return 0

    def announce(self, progress: Progress) -> None:
        """Send `progress` (the host's join code in force) at once on every link and NATS's end
        subject, as the goodbye goes, without waiting for it (any thread)."""
        if self._loop is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._goodbye(progress, 3.0), self._loop)

    async def _goodbye(self, progress: Progress, timeout: float) -> int:
        msg, stats_id = make_progress(self.ident, self.keys, progress)
        sealed = seal(self.keys, msg)
        self.intake.stats.verifier.remember(self.ident.node_id, stats_id, "self")
        waits = []
        for link in self._links.values():
            link.outbox.put(KIND_SEALED, sealed)
            waits.append((link, link.outbox.sent + len(link.outbox.queue)))
        deadline = time.monotonic() + timeout
        nats = getattr(self, "nats", None)  # and the NATS end subject, which students hear
        said = nats is not None and await nats.say_goodbye(sealed, timeout)
        while time.monotonic() < deadline and any(
            o.outbox.sent < n and not o.ws.closed for o, n in waits
        ):
            await asyncio.sleep(0.02)
        return sum(o.outbox.sent >= n for o, n in waits) + int(said)

    def _send_progress(self, progress: Progress) -> None:
        msg, stats_id = make_progress(self.ident, self.keys, progress)
        self._broadcast_stats(seal(self.keys, msg), stats_id)

    def _broadcast_stats(self, sealed: bytes, stats_id: str) -> None:
        self.intake.stats.verifier.remember(self.ident.node_id, stats_id, "self")
        self._queue_all(KIND_SEALED, sealed)
        if (
            self.nats is not None
        ):  # set in NetworkTransport.__init__, before any caller  # to whoever hosts a class view
            self.nats.publish(sealed, subject=self.nats.stats_subject)
        with self._lock:
            self.counters["stats_published"] += 1
