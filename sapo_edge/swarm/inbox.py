"""The network's inbox of verified batches, waiting for the trainer: bounded by count and by
the bytes they hold (a batch's decoded groups counted with it, every batch at least
ITEM_FLOOR), and fair when full, by the bound that is over: past the count, the oldest batch of
whichever sender holds the most batches goes first; past the bytes, that of whichever holds the
most bytes. So a flood from many throwaway identities cannot push an honest peer's batch out, and
neither can many tiny batches from one (issue 54: when the count was over, the eviction went by
bytes, and a thousand tiny batches pushed out every big honest one).
"""

from __future__ import annotations

from collections import Counter, deque

from ..data.rollout import Batch

ITEM_FLOOR = 4096  # what a batch counts against the byte bound at least: its objects, its entry


def held(payload: bytes) -> int:
    """What a batch costs the inbox: the memory it holds (a verified Batch keeps its decoded
    groups beside its bytes, a few times their wire size), else its length; ITEM_FLOOR at least."""
    return max(ITEM_FLOOR, payload.footprint if isinstance(payload, Batch) else len(payload))


class FairInbox:
    """Not thread-safe: the network transport guards it with its lock."""

    def __init__(self, max_items: int = 1024, max_bytes: int = 64 << 20) -> None:
        self.max_items, self.max_bytes = max_items, max_bytes
        self.items: deque[tuple[str, bytes]] = deque()
        self.bytes = 0
        self.by_sender: Counter = Counter()  # sender -> bytes held
        self.count_by_sender: Counter = Counter()  # sender -> batches held
        self.dropped = 0

    def put(self, sender: str, payload: bytes) -> int:
        """Add one batch; returns how many batches were evicted to make room."""
        self.items.append((sender, payload))
        self.bytes += held(payload)
        self.by_sender[sender] += held(payload)
        self.count_by_sender[sender] += 1
        evicted = 0
        while len(self.items) > self.max_items:
            by = self.count_by_sender
            self._evict_from(max(by, key=lambda s: (by[s], s)))
            evicted += 1
        while len(self.items) > 1 and self.bytes > self.max_bytes:
            self._evict_from(max(self.by_sender, key=lambda s: (self.by_sender[s], s)))
            evicted += 1
        self.dropped += evicted
        return evicted

    def _evict_from(self, sender: str) -> None:
        for i, (s, payload) in enumerate(self.items):
            if s == sender:
                del self.items[i]
                self.bytes -= held(payload)
                self.by_sender[s] -= held(payload)
                self.count_by_sender[s] -= 1
                if self.count_by_sender[s] <= 0:
                    del self.by_sender[s], self.count_by_sender[s]
                return

    def purge(self, sender: str) -> int:
        """Drop every batch `sender` has waiting (a member the host removed); how many."""
        n = self.count_by_sender.get(sender, 0)
        for _ in range(n):
            self._evict_from(sender)
        return n

    def drain(self) -> list[tuple[str, bytes]]:
        items = list(self.items)
        self.items.clear()
        self.bytes = 0
        self.by_sender.clear()
        self.count_by_sender.clear()
        return items

    def __len__(self) -> int:
        return len(self.items)
