"""The receiving side of members' stats (stats.py): each message checked (signature, room,
replay by sender and id, age, the sender's rate, then the figures or the progress) and, once
good, counted and handed to the class view; a bad one is counted as `stats_<reason>` (or
`progress_<reason>`) and charged like a bad batch (the signer when what it signed is wrong, else
the route: another room, age, replay and rate are batches.CONTEXT_REASONS).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .batches import BatchRejected, check_signature
from .progress import MAX_PROGRESS_BYTES, PROGRESS_PER_MINUTE, Progress
from .protocol import MAX_STATS_BYTES, PROTOCOL_VERSION, ProtocolError, Stats, load
from .roomkey import RoomKeys
from .routes import is_relay
from .signed_rate import SignedWindow
from .stats import RoundStats, check_stats_fields

# a signed body as stats.py makes it; a progress body has `progress` in place of `rounds`
_BODY = {
    "v": ("int", 0),
    "id": ("hex", 32),
    "sender": ("hex", 32),
    "room": ("hex", 32),
    "sent_at": ("float", 0),
    "rounds": ("rounds", 0),
}
_PROGRESS_BODY = {**{k: v for k, v in _BODY.items() if k != "rounds"}, "progress": ("dict", 0)}


@dataclass(frozen=True)
class VerifiedStats:
    sender: str  # the signer's node id: the row these figures belong to
    rounds: tuple[RoundStats, ...]  # its recent rounds, the newest last (none in a progress)
    sent_at: float
    route: str  # the link key it came by: a node id or "relay:URL"
    progress: Progress | None = None  # what it is doing now (a progress message)


class StatsVerifier:
    """Checks stats messages for one room: signature, replay by (sender, id), room, age, the
    sender's rate, then the figures. Progress messages: the same checks, a size limit of their
    own and a rate of their own (`progress_per_minute`); what is wrong with one is counted as
    progress_<reason>. Thread-confined (the network loop)."""

    def __init__(
        self,
        keys: RoomKeys,
        *,
        window_s: float = 300.0,
        per_minute: int = 120,
        progress_per_minute: int = PROGRESS_PER_MINUTE,
        max_seen: int = 100_000,
        max_senders: int = 4096,
    ) -> None:
        self.keys, self.window_s, self.per_minute = keys, window_s, per_minute
        self.max_seen, self.max_senders = max_seen, max_senders
        self.seen: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.progress_per_minute = progress_per_minute
        self.rates: OrderedDict[str, deque] = OrderedDict()
        self.signed: OrderedDict[str, SignedWindow] = OrderedDict()
        self.progress_rates: OrderedDict[str, deque] = OrderedDict()
        self.progress_signed: OrderedDict[str, SignedWindow] = OrderedDict()

    def remember(self, sender: str, stats_id: str, route: str) -> None:
        self.seen[(sender, stats_id)] = route
        while len(self.seen) > self.max_seen:
            self.seen.popitem(last=False)

    def _rate_ok(
        self, sender: str, now: float, sent_at: float, relay: bool, progress: bool = False
    ) -> bool:
        """Within the sender's stats (or progress) per minute? Through a relay by the signed
        sent_at (a relay that delays and bunches them cannot move it), else by arrival."""
        limit = self.progress_per_minute if progress else self.per_minute
        if relay:
            windows = self.progress_signed if progress else self.signed
            window = windows.pop(sender, None) or SignedWindow(self.window_s + 60.0)
            windows[sender] = window
            while len(windows) > self.max_senders:
                windows.popitem(last=False)
            return window.admit(sent_at, now, limit)
        rates = self.progress_rates if progress else self.rates
        times = rates.pop(sender, None) or deque()
        rates[sender] = times  # most recent last; the longest silent is forgotten first
        while len(rates) > self.max_senders:
            rates.popitem(last=False)
        while times and times[0] < now - 60.0:
            times.popleft()
        if len(times) >= limit:
            return False
        times.append(now)
        return True

    def verify(self, msg: Stats, route: str, now: float | None = None) -> VerifiedStats | None:
        """VerifiedStats, None for a duplicate by another route, or BatchRejected."""
        try:
            raw = check_signature(msg)
        except ProtocolError as e:
            raise BatchRejected(e.reason, str(e)) from None
        kind = ""
        try:  # signed: what is wrong here is the signer's doing (but CONTEXT_REASONS)
            obj = load(raw, MAX_STATS_BYTES)
            if isinstance(obj, dict) and "progress" in obj:
                kind = "progress_"
                if len(raw) > MAX_PROGRESS_BYTES:
                    raise ProtocolError(
                        "too_large", f"progress of {len(raw)} bytes, over {MAX_PROGRESS_BYTES}."
                    )
            body = check_stats_fields(obj, _PROGRESS_BODY if kind else _BODY, "stats body")
            if body["v"] != PROTOCOL_VERSION:
                raise ProtocolError("unknown_version", f"stats body has version {body['v']}.")
            if body["sender"] != msg.sender:
                raise ProtocolError("bad_identity", "the signed stats name another sender.")
        except ProtocolError as e:
            raise BatchRejected(kind + e.reason, str(e), msg.sender) from None
        first = self.seen.get((msg.sender, body["id"]))
        if first is not None:
            if first == route:
                raise BatchRejected("replay", "these stats were already received by this route.")
            return None
        if body["room"] != self.keys.lan_id:  # genuine stats of another class, resent
            raise BatchRejected("wrong_room", "the stats were made for another room.")
        now = time.time() if now is None else now
        sent_at = float(body["sent_at"])
        if not math.isfinite(sent_at) or abs(now - sent_at) > self.window_s:
            raise BatchRejected(
                "expired", f"the stats were sent over {self.window_s:.0f} s from now (clock skew?)."
            )
        relay = is_relay(route)
        if not self._rate_ok(msg.sender, now, sent_at, relay, bool(kind)):
            raise BatchRejected(kind + "rate_limited", "over its stats per minute.")
        if kind:
            try:
                progress = Progress.from_json(body["progress"])
            except ProtocolError as e:
                raise BatchRejected(kind + e.reason, str(e), msg.sender) from None
            self.remember(msg.sender, body["id"], route)
            return VerifiedStats(msg.sender, (), sent_at, route, progress)
        try:
            rounds = tuple(RoundStats.from_json(r) for r in body["rounds"])
        except ProtocolError as e:
            raise BatchRejected(e.reason, str(e), msg.sender) from None
        self.remember(msg.sender, body["id"], route)
        return VerifiedStats(msg.sender, rounds, sent_at, route)


class StatsIntake:
    """Where a sealed stats message goes once opened (swarm/intake.py hands it over, whatever
    route carried it): verified, counted, charged like a bad batch when bad, and handed to
    `on_stats` (the class view's board; called on the network loop). Thread-confined."""

    def __init__(self, self_id: str, keys: RoomKeys, book: Any, notify: Callable[[], None]) -> None:
        self.self_id, self.book, self.notify = self_id, book, notify
        self.counters = book.counters
        self.verifier = StatsVerifier(keys)
        self.on_stats: Callable[[VerifiedStats], None] | None = None
        self.log: Callable[[str], None] = lambda _m: None

    def accept(self, route: str, msg: Stats) -> bool:
        """True when the route is a peer link that must be dropped (it is now muted)."""
        if not is_relay(route) and msg.sender != route:
            return self.book.reject(route, "stats_wrong_sender")
        if msg.sender == self.self_id:
            return False  # our own, echoed
        sender_st = self.book.stats.get(msg.sender)
        if sender_st and sender_st.muted_until > time.time():
            with self.book.changed:
                self.counters["stats_dropped_muted"] += 1
            return False
        try:
            verified = self.verifier.verify(msg, route)
        except BatchRejected as e:
            who = e.signer or route
            if who != route:
                self.book.stat(who, None, "relay")
            mute = e.reason != "expired"  # a wrong clock is counted, never muted
            return self.book.reject(who, f"stats_{e.reason}", mute=mute) and who == route
        with self.book.changed:
            if verified is None:
                self.counters["stats_duplicate"] += 1
            else:
                kind = "progress" if verified.progress is not None else "stats"
                self.counters[f"{kind}_delivered"] += 1
        if verified is not None and self.on_stats is not None:
            try:
                self.on_stats(verified)
            except Exception as e:  # noqa: BLE001 - a view's bug must not drop the link
                self.log(f"class view: could not record stats: {e}")
        self.notify()
        return False
