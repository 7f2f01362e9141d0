"""Per-round stats a member publishes for the class view: signed by the member (Ed25519 over the
exact body) and sealed for the room like a rollout batch, as their own message kind (`stats`).
Each message repeats the member's last few rounds, so a round sent while its links were down
(starting up, a laptop asleep) still reaches the class with the next one. The same envelope
carries a member's progress (progress.py: what it is doing now) as a body with `progress` in
place of `rounds`, smaller and on a rate budget of its own. Strictly validated and size-capped; what is wrong with one is counted as `stats_<reason>` and charged like a bad
batch (the signer when it signed it, else the route that brought it).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sapo_edge.safejson import dumps_canonical

from .batches import BatchRejected, check_signature, seal
from .handshake import KIND_SEALED
from .identity import Identity
from .progress import (
    MAX_PROGRESS_BYTES,
    PROGRESS_EVERY,
    PROGRESS_PER_MINUTE,
    PROGRESS_REPEAT,
    Progress,
    ProgressSender,
)
from .protocol import (
    MAX_STATS_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
    Stats,
    check_fields,
    dump_message,
    load,
)
from .roomkey import RoomKeys
from .signed_rate import SignedWindow

ROLES = ("member", "baseline")  # baseline: trains alone (J=0) as the class's solo reference
MAX_PRODUCERS = 64  # producers one round's "learned from" may name
ROUNDS_PER_MESSAGE = 8  # a message repeats up to this many recent rounds (the newest last)
MAX_COUNT = 100_000  # any count in one round's figures
MAX_REWARD = 10.0  # rewards are in [0, 1 + format bonus]; anything far above is a lie or a bug
_BODY = {
    "v": ("int", 0),
    "id": ("hex", 32),
    "sender": ("hex", 32),
    "room": ("hex", 32),
    "sent_at": ("float", 0),
    "rounds": ("rounds", 0),
}
_PROGRESS_BODY = {**{k: v for k, v in _BODY.items() if k != "rounds"}, "progress": ("dict", 0)}
_STATS = {
    "round": ("int", 0),
    "reward": ("float", 0),
    "shared": ("int", 0),
    "trained_local": ("int", 0),
    "trained_external": ("int", 0),
    "aha": ("int", 0),
    "learned": ("dict", 0),
    "name": ("str", 40),
    "model": ("str", 120),
    "backend": ("str", 40),
    "device": ("str", 40),
    "role": ("str", 16),
}
_HEX = set("0123456789abcdef")


@dataclass(frozen=True)
class RoundStats:
    """What one member says about one of its rounds. Claims: the class view shows them as such."""

    round: int
    reward: float  # mean reward of its own completions (its own verifier)
    shared: int  # groups it published
    trained_local: int  # I: own groups trained on
    trained_external: int  # J: peers' groups trained on
    aha: int  # peer completions its verifier rewarded where all of its own failed
    learned: dict[str, tuple[int, int]]  # producer id -> (groups trained on, of those rewarded)
    name: str
    model: str
    backend: str
    device: str
    role: str = "member"

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "reward": self.reward,
            "shared": self.shared,
            "trained_local": self.trained_local,
            "trained_external": self.trained_external,
            "aha": self.aha,
            "learned": {k: list(v) for k, v in sorted(self.learned.items())},
            "name": self.name,
            "model": self.model,
            "backend": self.backend,
            "device": self.device,
            "role": self.role,
        }

    @classmethod
    def from_json(cls, obj: Any) -> RoundStats:
        """Validate a stats object from the network (or class.jsonl); only ProtocolError."""
        d = _fields(obj, _STATS, "stats")
        for key in ("round", "shared", "trained_local", "trained_external", "aha"):
            if d[key] > MAX_COUNT:
                raise ProtocolError("bad_value", f"stats.{key} is over {MAX_COUNT}.")
        reward = float(d["reward"])
        if not 0.0 <= reward <= MAX_REWARD:
            raise ProtocolError("bad_value", f"stats.reward must be in [0, {MAX_REWARD}].")
        for key in ("name", "model", "backend", "device"):
            if not d[key].isprintable():
                raise ProtocolError("bad_value", f"stats.{key} holds control characters.")
        if d["role"] not in ROLES:
            raise ProtocolError("bad_value", f"stats.role must be one of {', '.join(ROLES)}.")
        learned = d["learned"]
        if len(learned) > MAX_PRODUCERS:
            raise ProtocolError("too_large", f"stats.learned names over {MAX_PRODUCERS} producers.")
        pairs: dict[str, tuple[int, int]] = {}
        for producer, pair in learned.items():
            if len(producer) != 32 or not set(producer) <= _HEX:
                raise ProtocolError("bad_value", "stats.learned keys must be node ids.")
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
                or not 0 <= pair[1] <= pair[0] <= MAX_COUNT
            ):
                raise ProtocolError(
                    "bad_value", "stats.learned values must be [trained, rewarded <= trained]."
                )
            pairs[producer] = (pair[0], pair[1])
        if sum(t for t, _ in pairs.values()) > d["trained_external"]:
            raise ProtocolError("bad_value", "stats.learned counts more groups than it trained.")
        return cls(
            d["round"],
            reward,
            d["shared"],
            d["trained_local"],
            d["trained_external"],
            d["aha"],
            pairs,
            d["name"],
            d["model"],
            d["backend"],
            d["device"],
            d["role"],
        )


def _fields(obj: Any, spec: dict[str, tuple[str, int]], what: str) -> dict[str, Any]:
    """check_fields, plus "dict" fields (a JSON object) and "rounds" (a list of 1 to
    ROUNDS_PER_MESSAGE objects): present and of that shape; their contents the caller checks."""
    if not isinstance(obj, dict):
        raise ProtocolError("bad_type", f"a {what} must be a JSON object.")
    nested = {k: kind for k, (kind, _) in spec.items() if kind in ("dict", "rounds")}
    flat = {k: v for k, v in spec.items() if k not in nested}
    check_fields({k: v for k, v in obj.items() if k not in nested}, flat, what)
    for key, kind in nested.items():
        if key not in obj:
            raise ProtocolError("missing_field", f"{what} lacks {key}.")
        if kind == "dict" and not isinstance(obj[key], dict):
            raise ProtocolError("bad_type", f"{what}.{key} must be an object.")
        if kind == "rounds" and (
            not isinstance(obj[key], list) or not 0 < len(obj[key]) <= ROUNDS_PER_MESSAGE
        ):
            raise ProtocolError(
                "bad_type", f"{what}.{key} must be a list of 1 to {ROUNDS_PER_MESSAGE} rounds."
            )
    return obj


def make_stats(
    ident: Identity,
    keys: RoomKeys,
    rounds: RoundStats | list[RoundStats],
    *,
    stats_id: str | None = None,
    sent_at: float | None = None,
) -> tuple[bytes, str]:
    """Sign a member's recent rounds (the newest last; the oldest are left out while over the
    size limit) for the room; returns (envelope bytes, message id)."""
    recent = ([rounds] if isinstance(rounds, RoundStats) else list(rounds))[-ROUNDS_PER_MESSAGE:]
    stats_id = stats_id or os.urandom(16).hex()
    while True:
        body = _body(ident, keys, stats_id, sent_at, rounds=[r.to_json() for r in recent])
        raw = body.encode("utf-8")
        if len(raw) <= MAX_STATS_BYTES or len(recent) == 1:
            break
        recent = recent[1:]
    if len(raw) > MAX_STATS_BYTES:
        raise ValueError(f"stats of {len(raw)} bytes are over the {MAX_STATS_BYTES} limit.")
    return _signed(ident, body, raw), stats_id


def _body(
    ident: Identity, keys: RoomKeys, stats_id: str, sent_at: float | None, **payload: Any
) -> str:
    """A stats body: who, which room, when, and the figures or the progress."""
    return dumps_canonical(
        {
            "v": PROTOCOL_VERSION,
            "id": stats_id,
            "sender": ident.node_id,
            "room": keys.lan_id,
            "sent_at": time.time() if sent_at is None else sent_at,
            **payload,
        }
    )


def _signed(ident: Identity, body: str, raw: bytes) -> bytes:
    """The stats envelope around a body (figures or progress), signed by the sender."""
    return dump_message(
        {
            "type": "stats",
            "sender": ident.node_id,
            "public_key": ident.public_key.hex(),
            "body": body,
            "signature": ident.sign(raw).hex(),
        }
    )


def make_progress(
    ident: Identity,
    keys: RoomKeys,
    progress: Progress,
    *,
    stats_id: str | None = None,
    sent_at: float | None = None,
) -> tuple[bytes, str]:
    """Sign what this node is doing now for the room; returns (envelope bytes, message id)."""
    stats_id = stats_id or os.urandom(16).hex()
    body = _body(ident, keys, stats_id, sent_at, progress=progress.to_json())
    raw = body.encode("utf-8")
    if len(raw) > MAX_PROGRESS_BYTES:
        raise ValueError(f"progress of {len(raw)} bytes is over the {MAX_PROGRESS_BYTES} limit.")
    return _signed(ident, body, raw), stats_id


@dataclass(frozen=True)
class VerifiedStats:
    sender: str  # the signer's node id: the row these figures belong to
    rounds: tuple[RoundStats, ...]  # its recent rounds, the newest last (none in a progress)
    sent_at: float
    route: str  # the link key it came by: a node id or "relay:URL"
    progress: Progress | None = None  # what it is doing now (a progress message)


class StatsVerifier:
    """Checks stats messages for one room: signature, room, replay by (sender, id), age, the
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
        try:  # signed: from here on what is wrong is the signer's doing
            obj = load(raw, MAX_STATS_BYTES)
            if isinstance(obj, dict) and "progress" in obj:
                kind = "progress_"
                if len(raw) > MAX_PROGRESS_BYTES:
                    raise ProtocolError(
                        "too_large", f"progress of {len(raw)} bytes, over {MAX_PROGRESS_BYTES}."
                    )
            body = _fields(obj, _PROGRESS_BODY if kind else _BODY, "stats body")
            if body["v"] != PROTOCOL_VERSION:
                raise ProtocolError("unknown_version", f"stats body has version {body['v']}.")
            if body["sender"] != msg.sender:
                raise ProtocolError("bad_identity", "the signed stats name another sender.")
        except ProtocolError as e:
            raise BatchRejected(kind + e.reason, str(e), msg.sender) from None
        if body["room"] != self.keys.lan_id:
            raise BatchRejected("wrong_room", "the stats were made for another room.", msg.sender)
        first = self.seen.get((msg.sender, body["id"]))
        if first is not None:
            if first == route:
                raise BatchRejected("replay", "these stats were already received by this route.")
            return None
        now = time.time() if now is None else now
        sent_at = float(body["sent_at"])
        if not math.isfinite(sent_at) or abs(now - sent_at) > self.window_s:
            raise BatchRejected(
                "expired", f"the stats were sent over {self.window_s:.0f} s from now (clock skew?)."
            )
        relay = route.startswith("relay:")
        if not self._rate_ok(msg.sender, now, sent_at, relay, bool(kind)):
            raise BatchRejected(kind + "rate_limited", "over its stats per minute.", msg.sender)
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
        if not route.startswith("relay:") and msg.sender != route:
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
        if getattr(self, "nats", None) is not None:
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
        if getattr(self, "nats", None) is not None:  # to whoever hosts a class view
            self.nats.publish(sealed, subject=self.nats.stats_subject)
        with self._lock:
            self.counters["stats_published"] += 1
