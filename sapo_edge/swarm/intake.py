"""What every route does with a sealed batch that arrives, whatever carried it (a peer's
websocket, the relay's, a NATS subscription): open, verify, charge whoever is provably at fault
(the signer, or else the route), rate-limit the sender and hand the batch to the byte-bounded
fair inbox. One copy of this path: NetworkTransport and the scale harness's nodes both use it.
A sealed members' stats message (the class view's) goes to stats_intake.StatsIntake instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..data.textsafe import clean
from .batches import BatchRejected, RolloutVerifier, VerifiedBatch, unseal_any
from .inbox import FairInbox
from .peerbook import PeerBook
from .protocol import ProtocolError, Stats
from .roomkey import RoomKeys
from .routes import is_relay
from .stats_intake import StatsIntake


class Intake:
    """Thread-confined to the network loop, except drain() (guarded by the book's lock)."""

    def __init__(
        self,
        self_id: str,
        keys: RoomKeys,
        book: PeerBook,
        *,
        window_s: float = 300.0,
        stale_rounds: int = 10,
        inbox_limit: int = 1024,
        inbox_bytes: int = 64 << 20,
        max_batches_per_minute: int = 60,
        notify: Callable[[], None] = lambda: None,
        accepted: Callable[[], tuple[RoomKeys, ...]] | None = None,
    ) -> None:
        self.self_id, self.book, self.notify = self_id, book, notify
        # the keys a box may open with (the network's KeyRing.accepted; by default `keys`)
        self.accepted = accepted or (lambda: (keys,))
        self.counters = book.counters
        self.max_batches_per_minute = max_batches_per_minute
        self.verifier = RolloutVerifier(keys, window_s=window_s, stale_rounds=stale_rounds)
        self.inbox = FairInbox(inbox_limit, inbox_bytes)
        self.stats = StatsIntake(self_id, keys, book, notify)
        self._skew_said: dict[str, float] = {}

    def accept(self, route: str, via: str, data: bytes, *, stats_only: bool = False) -> bool:
        """Open, verify and deliver one sealed batch that came by `route` (a peer's node id, or
        'relay:URL' for a relay or NATS route, where any member may be the signer). True when
        the route is a peer link that must be dropped (it is now muted). `stats_only`: the route
        carries members' stats alone (the NATS class subject): rollouts there are dropped
        unverified, never delivered around the shard budget."""
        return self.accept_verified(route, via, data, stats_only=stats_only) is True

    def accept_verified(
        self, route: str, via: str, data: bytes, *, stats_only: bool = False
    ) -> bool | VerifiedBatch | None:
        """accept(), returning the VerifiedBatch when one was delivered (for the harness's
        counts), True when the route must be dropped, else None."""
        try:
            envelope = self.unseal(data)
        except ProtocolError as e:  # made without the room key, or altered: the route sent it
            return self._reject(route, e.reason) or None
        return self.accept_unsealed(route, via, envelope, stats_only=stats_only)

    def unseal(self, data: bytes) -> bytes:
        """The signed envelope in a sealed box, opened with the room's keys (the newest, then
        replaced ones still accepted); ProtocolError when it does not open."""
        return unseal_any(self.accepted(), data)

    def accept_unsealed(
        self, route: str, via: str, envelope: bytes, *, stats_only: bool = False
    ) -> bool | VerifiedBatch | None:
        """accept_verified() of a box already unsealed (the NATS route unseals first, to count
        only what a member made against its budget)."""
        relay = is_relay(route)
        try:
            msg = self.verifier.parse(envelope)
        except ProtocolError as e:  # nobody inside is provable: the route sent it
            return self._reject(route, e.reason) or None
        if isinstance(msg, Stats):
            return self.stats.accept(route, msg) or None
        if stats_only:
            with self.book.changed:
                self.counters["rollouts_on_stats_route"] += 1
            return None
        if not relay and msg.sender != route:
            return self._reject(route, "wrong_sender") or None
        if msg.sender == self.self_id:
            return None  # our own batch, echoed
        if msg.sender in self.book.removed or self.book.shut_out:  # the host removed it (or us)
            with self.book.changed:
                self.counters["dropped_removed"] += 1
            return None
        sender_st = self.book.stats.get(msg.sender)
        if sender_st and sender_st.muted_until > time.time():
            with self.book.changed:
                self.counters["dropped_muted"] += 1
            return None
        try:
            batch = self.verifier.verify(
                msg, route, admit=lambda sender, sent_at: self._rate_ok(sender, sent_at, relay)
            )
        except BatchRejected as e:
            who = e.signer or route
            if who != route:
                self.book.stat(who, None, "relay")
            if e.reason == "expired":  # a wrong clock, not an attack: counted, said, never muted
                self._say_skew(route, str(e))
                self.book.reject(who, e.reason, mute=False)
                return None
            return (self._reject(who, e.reason) and who == route) or None
        if batch is None:
            with self.book.changed:
                self.counters["duplicate"] += 1
            self.notify()
            return None
        st = self.book.stat(msg.sender, None, "relay" if relay else via)
        with self.book.changed:
            st.last_seen = time.time()
            st.received += batch.groups
            st.accepted += batch.groups
            dropped = self.inbox.put(msg.sender, batch.payload)
            if dropped:
                self.counters["inbox_dropped"] += dropped
            self.counters["delivered"] += 1
        self.notify()
        return batch

    def drain(self) -> list[tuple[str, bytes]]:
        with self.book.changed:
            return self.inbox.drain()

    def _rate_ok(self, sender: str, sent_at: float, relay: bool) -> bool:
        """A new, validly signed batch from `sender`: within its batches per minute? On a
        direct link, by arrival (the link is the sender); through a relay, by the signed
        sent_at, which a relay that delays and bunches batches cannot move."""
        st = self.book.stat(sender, None, "")
        if relay:
            keep = self.verifier.window_s + 60.0
            return self.book.signed_rate_ok(st, sent_at, keep, self.max_batches_per_minute)
        return self.book.rate_ok(st, time.time(), self.max_batches_per_minute)

    def reject_route(self, route: str, reason: str) -> bool:
        """Charge `route` with a refusal of something nobody inside is provable for."""
        return self._reject(route, reason)

    def _reject(self, key: str, reason: str) -> bool:
        return self.book.reject(key, reason)

    def _say_skew(self, route: str, text: str) -> None:
        """Tell the user about a peer's clock at most once a minute per route."""
        now = time.monotonic()
        if now - self._skew_said.get(route, -1e9) < 60.0:
            return
        if len(self._skew_said) > 1024:
            self._skew_said.clear()
        self._skew_said[route] = now
        self.book.log(f"refusing batches from a peer whose clock is off: {clean(text, 300)}")
