"""What a node knows about its peers, as small snapshots a dashboard can show.

A transport that knows its peers (the network one) offers `peers() -> list[PeerInfo]`; without
one, `PeerTally` derives the same rows from the rollout groups the node itself received.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace

CONNECTIONS = ("lan", "relay", "manual", "in-process", "unknown")


@dataclass(frozen=True)
class PeerInfo:
    """One row of the peers table. Counts are groups, since this node started."""

    node_id: str
    name: str = ""  # a display name when the peer announces one
    model: str = ""
    backend: str = ""  # e.g. "torch/cuda", "mlx"; empty when the peer does not say
    connection: str = "unknown"  # one of CONNECTIONS
    last_seen: float | None = None  # unix time of the last payload from this peer
    received: int = 0  # groups that arrived
    accepted: int = 0  # groups that entered the pool
    rejected: int = 0  # groups or payloads refused (decode errors, duplicates, own, ...)
    rejections: dict[str, int] = field(default_factory=dict)  # reason -> count
    claimed_reward: float | None = None  # mean reward the producer reported, latest groups
    connected: bool = True  # a live link now (network transport); tallies assume so
    muted: bool = False  # over the rejection threshold: ignored for a while (network transport)

    @property
    def top_rejection(self) -> str:
        if not self.rejections:
            return ""
        reason, count = max(self.rejections.items(), key=lambda kv: (kv[1], kv[0]))
        return f"{reason} ({count})"


class PeerTally:
    """Per-producer counts of what arrived (thread-safe), for transports without `peers()`."""

    def __init__(self, connection: str = "unknown", window: int = 64) -> None:
        self._lock = threading.Lock()
        self._peers: dict[str, PeerInfo] = {}
        self._connection = connection
        self._claimed: dict[str, list[float]] = {}
        self._fresh: list[float] = []  # claimed group means since the last take_claimed()
        self._window = window

    def _get(self, key: str) -> PeerInfo:
        return self._peers.get(key) or PeerInfo(node_id=key, connection=self._connection)

    def group(
        self,
        producer: str,
        model: str,
        rewards: tuple[float, ...],
        accepted: bool,
        reason: str = "",
    ) -> None:
        """One decoded group arrived; `reason` says why it was not accepted."""
        with self._lock:
            p = self._get(producer)
            rej = Counter(p.rejections)
            if not accepted:
                rej[reason or "rejected"] += 1
            claimed = self._claimed.setdefault(producer, [])
            if rewards:
                claimed.append(sum(rewards) / len(rewards))
                del claimed[: -self._window]
                self._fresh.append(claimed[-1])
            self._peers[producer] = replace(
                p,
                model=model or p.model,
                last_seen=time.time(),
                received=p.received + 1,
                accepted=p.accepted + int(accepted),
                rejected=p.rejected + int(not accepted),
                rejections=dict(rej),
                claimed_reward=sum(claimed) / len(claimed) if claimed else None,
            )

    def payload_rejected(self, sender: str, reason: str) -> None:
        """A whole payload from `sender` failed to decode (its producer is unknown)."""
        with self._lock:
            p = self._get(sender)
            rej = Counter(p.rejections)
            rej[reason] += 1
            self._peers[sender] = replace(
                p, last_seen=time.time(), rejected=p.rejected + 1, rejections=dict(rej)
            )

    def take_claimed(self) -> list[float]:
        """Mean rewards producers claimed for the groups received since the last call (the
        swarm's own view of how it is doing; this node re-scores before training on any)."""
        with self._lock:
            fresh, self._fresh = self._fresh, []
            return fresh

    def snapshot(self) -> list[PeerInfo]:
        with self._lock:
            return sorted(self._peers.values(), key=lambda p: p.node_id)


def peer_snapshot(transport: object, tally: PeerTally) -> list[PeerInfo]:
    """The transport's own view when it has one, else what the node saw arrive."""
    peers = getattr(transport, "peers", None)
    if callable(peers):
        try:
            found = peers()
        except Exception:  # a transport bug must not take the dashboard down
            found = None
        if isinstance(found, list) and all(isinstance(p, PeerInfo) for p in found):
            return found
    return tally.snapshot()
