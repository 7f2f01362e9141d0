"""How fast a node publishes: under the batches per minute its peers accept (theirs default to
ours), spread over the minute. A batch over it is not sent (counted, said once a minute) rather
than refused and counted against this node by every peer, which would end in a mute."""

from __future__ import annotations

import time
from collections import deque

from .netcore import NetCore


class PublishPace:
    """At most `per_minute` batches in any minute, at most a sixth of them (rounded up) in any
    10 s, and those spread over the 10 s (a bucket of half of them, rounded up, refilled at a
    tenth of them a second: at the default 60, 5 at once and then 1 a second), so a node
    whose rounds take milliseconds (a tiny model) does not spend the whole minute in its first
    seconds, before its peers are even connected, and then fall silent; nor a 10 s window's
    share in its first second, which a peer that links in the other nine never hears (the
    namespace LAN test's cut node then received nothing in a whole run, 1 run in 10)."""

    def __init__(self, core: NetCore, per_minute: int) -> None:
        self.core, self.per_minute = core, per_minute
        self.sent: deque[float] = deque()  # when recent batches were published
        self.per_10s = -(-per_minute // 6)
        self.burst = float(-(-self.per_10s // 2))  # batches that may go at once
        self.tokens, self.filled = self.burst, None  # the bucket, and when it was last filled
        self._said = -1e9

    def take(self) -> bool:
        """True: send this batch now; False: it is over the pace (counted as publish_paced)."""
        now = time.monotonic()
        with self.core.lock:
            sent = self.sent
            while sent and sent[0] < now - 60.0:
                sent.popleft()
            recent = sum(1 for t in sent if t >= now - 10.0)
            if self.filled is not None:
                self.tokens = min(self.burst, self.tokens + (now - self.filled) * self.per_10s / 10)
            self.filled = now
            if len(sent) < self.per_minute and recent < self.per_10s and self.tokens >= 1.0:
                self.tokens -= 1.0
                sent.append(now)
                return True
            self.core.counters["publish_paced"] += 1
            say = now - self._said >= 60.0
            if say:
                self._said = now
        if say:
            self.core.log(
                f"publishing faster than the {self.per_minute} batches a minute peers accept: "
                "extra batches are not sent (training goes on)"
            )
        return False
