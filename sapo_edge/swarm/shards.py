"""Sharding a room on NATS so a node's inbound traffic stays flat as the swarm grows (the math
is in docs/scale.md). Every batch goes to one uniformly drawn leaf of a 16-ary subject tree
`sapo.<relay-id>.h.h.h.h` (65,536 leaves); a node listens to k subtrees at depth d, a share
k/16^d of the room chosen so its expected inbound stays under its budget, and draws its
subtrees again every few rounds, so over time it hears from every producer.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

FANOUT = 16  # hex digits: one subject token per level
MAX_DEPTH = 4  # 16^4 = 65,536 leaves: a budget of ~8 batches per round holds up to ~500k nodes
MAX_SUBTREES = FANOUT - 1  # k < 16 at depth d (16 subtrees at depth d are one at d - 1)
PREFIX = "sapo"


def room_subject(relay_id: str) -> str:
    """The subject root of a room: its HKDF relay route id, never its name."""
    return f"{PREFIX}.{relay_id}"


def leaf_subject(relay_id: str, rng: random.Random) -> str:
    """A uniformly drawn leaf to publish one batch to."""
    digits = ".".join(f"{rng.randrange(FANOUT):x}" for _ in range(MAX_DEPTH))
    return f"{room_subject(relay_id)}.{digits}"


def subtree_subject(relay_id: str, depth: int, index: int) -> str:
    """The subscription for subtree `index` (0 <= index < 16^depth) at `depth`."""
    digits = [f"{(index // FANOUT**i) % FANOUT:x}" for i in reversed(range(depth))]
    tail = ".".join(digits + ([">"] if depth < MAX_DEPTH else []))
    return f"{room_subject(relay_id)}.{tail}"


@dataclass(frozen=True)
class FanIn:
    """Listen to k subtrees at depth d: a share k / 16^d of the room's batches."""

    depth: int = 0
    k: int = 1

    @property
    def share(self) -> float:
        return self.k / FANOUT**self.depth


EVERYTHING = FanIn(0, 1)
NARROWEST = FanIn(MAX_DEPTH, 1)


def choose_fanin(room_rate: float, budget: float) -> FanIn:
    """The widest fan-in whose expected inbound (room_rate x share) is at most `budget`, both
    in batches per round; the narrowest one when even that is over. With k < 16 the expected
    inbound lands in [budget / 2, budget] (see docs/scale.md)."""
    if room_rate <= budget:
        return EVERYTHING
    target = budget / room_rate
    for depth in range(1, MAX_DEPTH + 1):
        k = math.floor(target * FANOUT**depth + 1e-9)
        if k >= 1:
            return FanIn(depth, min(k, MAX_SUBTREES))
    return NARROWEST


def draw_subtrees(fan: FanIn, rng: random.Random) -> list[int]:
    """k distinct subtrees at the fan-in's depth, uniformly."""
    return sorted(rng.sample(range(FANOUT**fan.depth), fan.k))


class RateEstimate:
    """The room's batch rate (per second, at share 1), from what arrived on the subtrees this
    node listened to: arrivals / exposure, where exposure is share x seconds listened, over a
    sliding window of `window_s`. Unbiased whatever the fan-in was, since leaves are uniform.
    The window's totals are kept as spans come and go: a node ticks many times a second, and a
    thousand of them in one process (bench/scale_nodes.py) summed their windows on every tick."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self.spans: deque[tuple[float, int, float]] = deque()  # (end time, arrivals, exposure)
        self.arrivals = 0  # since the last close()
        self.seen = 0  # arrivals in the window
        self._exposure = 0.0  # exposure in the window
        self._exposed = 0  # spans in the window with exposure > 0

    def arrived(self, n: int = 1) -> None:
        self.arrivals += n

    def close(self, now: float, seconds: float, share: float) -> None:
        """End a span of `seconds` listened at `share`."""
        self._add((now, self.arrivals, seconds * share), +1)
        self.arrivals = 0
        while self.spans and self.spans[0][0] < now - self.window_s:
            self._add(self.spans[0], -1)

    def _add(self, span: tuple[float, int, float], sign: int) -> None:
        if sign > 0:
            self.spans.append(span)
        else:
            self.spans.popleft()
        self.seen += sign * span[1]
        if span[2] > 0:
            self._exposed += sign
            self._exposure = self._exposure + sign * span[2] if self._exposed else 0.0
            if sign < 0 and self._exposed and self._exposure < 1e-6 * span[2]:
                # a span that outweighed what is left went: the running sum is mostly rounding
                # error now (or <= 0), so sum what is left exactly (rare: the share changed a lot)
                self._exposure = math.fsum(e for _, _, e in self.spans if e > 0)

    def rate(self) -> float | None:
        return self.seen / self._exposure if self._exposed and self._exposure > 0 else None


START = FanIn(2, 1)  # 1/256 of the room until this node has heard enough to tell its size


@dataclass
class ShardPlanner:
    """Decides a node's fan-in (pure: the NATS route applies what it says).

    budget_groups: the most groups this node takes in per round (the setting); groups_per_batch
    and round_s (this node's round time, between drains) are measured. A node starts at START:
    joining a swarm of 100,000 costs it ~400 batches once, not the whole room. It narrows as
    soon as the estimate says it is over budget (any tick), and widens 16x after a round in which
    it heard too little to estimate (fewer than `min_sample` batches in the round and in the
    estimate's window): a small room reaches 'everything' in two rounds."""

    budget_groups: int = 64
    redraw_rounds: int = 3
    min_sample: int = 3
    groups_per_batch: float = 8.0
    round_s: float = 60.0
    fan: FanIn = START
    rounds_since_draw: int = 0
    rounds: int = 0
    measured_batches: bool = False

    @property
    def budget_batches(self) -> float:
        return max(1.0, self.budget_groups / max(1.0, self.groups_per_batch))

    def tick(self, est: RateEstimate) -> FanIn:
        """The fan-in to use from now on, given the estimate so far."""
        rate = est.rate()
        if est.seen < self.min_sample or rate is None:
            return self.fan  # too little heard to tell: widening waits for the round's end
        room = rate * self.round_s  # the room's batches per round of this node
        inbound, budget = room * self.fan.share, self.budget_batches
        # hysteresis: choose_fanin() aims at [budget/2, budget]; the estimate is noisy
        if 0.4 * budget <= inbound <= 1.3 * budget:
            return self.fan
        return choose_fanin(room, budget)

    def round_done(
        self, seconds: float, groups_per_batch: float | None, heard: int, seen: int | None = None
    ) -> bool:
        """A round ended (the trainer drained; `heard` batches arrived in it, `seen` in the
        estimate's window); True when the subscriptions must change: widened (too little heard
        to estimate anything), or due to be drawn again."""
        if seconds > 0:
            self.round_s = 0.7 * self.round_s + 0.3 * seconds if self.rounds else seconds
        self.rounds += 1
        if groups_per_batch:
            first = not self.measured_batches
            self.groups_per_batch = (
                groups_per_batch if first else 0.7 * self.groups_per_batch + 0.3 * groups_per_batch
            )
            self.measured_batches = True
        self.rounds_since_draw += 1
        if max(heard, seen or 0) < self.min_sample and self.fan.depth > 0:
            self.fan = FanIn(self.fan.depth - 1, 1)
            self.rounds_since_draw = 0
            return True
        if self.rounds_since_draw >= self.redraw_rounds:
            self.rounds_since_draw = 0
            return True
        return False
