"""What a node knows about each peer: identity, route, counts, rejections by reason, and the
mute policy (too many rejections in a window: muted, with a backoff that doubles each time).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..data.textsafe import clean
from .identity import name_for_id
from .peers import PeerInfo
from .protocol import Auth
from .signed_rate import SignedWindow

_DERIVED = re.compile(r"[a-z]+-[a-z]+-[0-9a-f]{4}")


@dataclass
class PeerStats:
    name: str = ""
    node_id: str = ""
    model: str = ""
    backend: str = ""
    via: str = ""
    connected: bool = False
    last_seen: float = 0.0
    received: int = 0
    accepted: int = 0
    rejected: int = 0
    reasons: Counter = field(default_factory=Counter)
    recent: deque = field(default_factory=deque)  # times of recent rejections
    batches: deque = field(default_factory=deque)  # times of recent batches (rate limit)
    signed: SignedWindow | None = None  # signed times of those that came by a relay
    muted_until: float = 0.0
    mutes: int = 0


class PeerBook:
    """Per-peer records keyed by node id (or 'relay:URL', 'ip:ADDR' for unproven routes).

    Shares the transport's lock (through its Condition) so waiters are woken on every change.
    """

    def __init__(
        self,
        changed: threading.Condition,
        counters: Counter,
        *,
        reject_threshold: int,
        reject_window: float,
        mute_base: float,
        max_tracked: int,
        log: Callable[[str], None],
        own_name: str = "",
    ) -> None:
        self.changed, self.counters, self.log = changed, counters, log
        self.own_name = own_name
        self.reject_threshold, self.reject_window = reject_threshold, reject_window
        self.mute_base, self.max_tracked = mute_base, max_tracked
        self.stats: dict[str, PeerStats] = {}
        # members the class's host removed (its signed word): refused at the handshake and at
        # the intake until it readmits them; never forgotten as `stats` rows are
        self.removed: set[str] = set()
        self.shut_out = False  # this laptop was removed: no classmate's batch is taken

    def stat(self, key: str, auth: Auth | None, via: str, node_id: str = "") -> PeerStats:
        with self.changed:
            st = self.stats.get(key)
            if st is None:
                if len(self.stats) >= self.max_tracked:  # forget the longest-silent stranger
                    idle = [k for k, v in self.stats.items() if not v.connected]
                    if idle:
                        del self.stats[min(idle, key=lambda k: self.stats[k].last_seen)]
                st = self.stats[key] = PeerStats(via=via)
                if is_node_id(key):
                    st.node_id = key
            if auth is not None:
                st.node_id = node_id or st.node_id
                st.name = peer_name(auth.name, st.node_id)
                st.model, st.backend = clean(auth.model, 200), clean(auth.backend, 40)
                st.via = via
            else:
                st.via = st.via or via
                if not st.name and st.node_id:
                    st.name = name_for_id(st.node_id)
            return st

    def reject(self, key: str, reason: str, mute: bool = True) -> bool:
        """Count a rejection for `key`; True when it crosses the threshold and is now muted.
        mute=False counts it without moving toward a mute (an honest peer's wrong clock)."""
        st = self.stat(key, None, "")
        now = time.time()
        with self.changed:
            self.counters[f"rejected:{reason}"] += 1
            st.rejected += 1
            st.reasons[reason] += 1
            if mute:
                st.recent.append(now)
            while st.recent and st.recent[0] < now - self.reject_window:
                st.recent.popleft()
            self.changed.notify_all()
            if not mute:
                return False
            if not is_node_id(key) or len(st.recent) < self.reject_threshold:
                return False  # only a proven identity is muted, never an address or the relay
            st.mutes += 1
            st.muted_until = now + min(3600.0, self.mute_base * 2 ** (st.mutes - 1))
            st.recent.clear()
            self.counters["muted"] += 1
        self.log(
            f"peer {clean(st.name or key[:16], 64)} muted for {st.muted_until - now:.0f} s ({reason})"
        )
        return True

    def rate_ok(self, st: PeerStats, now: float, per_minute: int) -> bool:
        """Record one batch from this peer; False when it is over `per_minute`."""
        with self.changed:
            while st.batches and st.batches[0] < now - 60.0:
                st.batches.popleft()
            if len(st.batches) >= per_minute:
                return False
            st.batches.append(now)
            return True

    def signed_rate_ok(self, st: PeerStats, sent_at: float, keep_s: float, per_minute: int) -> bool:
        """rate_ok() by the signed time of a batch that came through a relay (signed_rate)."""
        with self.changed:
            if st.signed is None:
                st.signed = SignedWindow(keep_s)
            return st.signed.admit(sent_at, time.time(), per_minute)

    def peers(self) -> list[PeerInfo]:
        now = time.time()
        with self.changed:
            rows = []
            known = [s for s in self.stats.values() if s.node_id]
            names = Counter(s.name for s in known)
            for s in known:
                # two peers showing one name (or ours) are both told apart by their ids
                clash = names[s.name] > 1 or s.name == self.own_name
                rows.append(
                    PeerInfo(
                        node_id=s.node_id,
                        name=f"{s.name}#{s.node_id[:6]}" if clash else s.name,
                        model=s.model,
                        backend=s.backend,
                        connection=s.via,
                        last_seen=s.last_seen or None,
                        received=s.received,
                        accepted=s.accepted,
                        rejected=s.rejected,
                        rejections=dict(s.reasons),
                        connected=s.connected,
                        muted=s.muted_until > now,
                    )
                )
            return rows

    def rejections(self, key: str | None = None) -> Counter:
        with self.changed:
            if key is not None:
                return Counter(self.stats[key].reasons) if key in self.stats else Counter()
            total: Counter = Counter()
            for s in self.stats.values():
                total.update(s.reasons)
            return total


def is_node_id(key: str) -> bool:
    return len(key) == 32 and all(c in "0123456789abcdef" for c in key)


def peer_name(announced: str, node_id: str) -> str:
    """The name shown for a peer: its announced name made safe, unless it copies the shape of
    a derived name ('swift-otter-3f2a') that is not its own; then its own derived name."""
    name = clean(announced, 40).strip()
    if not name or (_DERIVED.fullmatch(name) and name != name_for_id(node_id)):
        return name_for_id(node_id) if node_id else name
    return name
