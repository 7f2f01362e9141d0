"""Noticing that this process stood still: a laptop that slept (its monotonic clock paused, its
wall clock did not) or a process that was stopped (both clocks ran on). GapWatch compares both
clocks with its last tick; the links layer re-dials at once after a gap (dialing._on_resume)."""

from __future__ import annotations

import time
from collections.abc import Callable


class GapWatch:
    """gap() is called about every `tick` seconds; it returns how much longer than a tick has
    passed since the last call, by whichever clock moved more (a clock stepped back by NTP
    counts as no time at all). The clocks are arguments so tests can move them."""

    def __init__(
        self,
        tick: float = 1.0,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tick, self.wall, self.mono = tick, wall, mono
        self.reset()

    def reset(self) -> None:
        """Start counting from now."""
        self._w, self._m = self.wall(), self.mono()

    def gap(self) -> float:
        w, m = self.wall(), self.mono()
        passed = max(w - self._w, m - self._m, 0.0)
        self._w, self._m = w, m
        return max(0.0, passed - self.tick)
