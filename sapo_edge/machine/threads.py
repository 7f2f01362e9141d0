"""How many compute threads this process should use now: the cores it may run on, less what
other programs are using on them.

Why: torch's OpenMP threads meet at a barrier after every parallel op. When another busy program
holds one of the two cores of a laptop, the thread on that core runs only in its time slices and
every op waits for it: a round took 15-25x longer with one busy loop beside it, while one thread
took 1.4x (issue 27). So the policy counts the other programs' load, not its own speed:

- `LoadMeter` reads the CPU time every core this process may use spent busy (psutil, the same
  counters `top` reads) and subtracts this process's own CPU time: what is left is other
  programs' work, in cores. Time stolen by a hypervisor counts as busy. Time of `nice`d programs
  counts only when this process is niced itself or the kernel groups processes by session
  (autogroup), where niceness does not give this process the core back.
- `ThreadPolicy` turns that load into a thread count: the cores nobody else uses, rounded
  (two cores with a busy loop on one: one thread), with a hysteresis band so a flickering load
  does not flip the count at every step. It samples at most once a second; the backend asks at
  every decode step and micro-batch, so a program that starts mid-round is noticed within a step
  or two, and a quiet machine gets all its cores back as soon as the other program ends.

Measuring speed instead (a step's seconds against its work) cannot tell contention from a longer
prompt, and spinning threads keep their own CPU time high while they wait, so their own counters
say nothing. A user's OMP_NUM_THREADS or `--threads N` pins the count and turns the policy off.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MIN_INTERVAL = 1.0  # seconds between two load samples (a shorter window is mostly noise)
DROP_AT = 0.4  # a thread is given up when others use more than this much of the cores left
REGAIN_BELOW = 0.15  # ... and taken back only once their use stays below this
REGAIN_WINDOWS = 3  # ... for this many windows in a row (a flickering load does not flip it)


_AFFINITY = hasattr(os, "sched_getaffinity")  # Linux; macOS and Windows have no affinity mask


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    if _AFFINITY:
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def pinned_threads(setting: int) -> int | None:
    """The thread count a person chose, or None for the adaptive policy: `--threads N` (N > 0)
    first, then OMP_NUM_THREADS when it holds a positive integer; at most 4 per usable core."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    chosen = setting if setting > 0 else int(env) if env.isdigit() and int(env) > 0 else None
    return min(chosen, 4 * usable_cores()) if chosen else None


@dataclass(frozen=True)
class LoadSample:
    at: float  # monotonic seconds
    busy: float  # CPU seconds the usable cores spent busy, counted since boot
    own: float  # CPU seconds this process spent


def _autogroup() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


class LoadMeter:
    """Samples of the usable cores' busy time and this process's CPU time (psutil)."""

    def __init__(self, cores: list[int] | None = None) -> None:
        import psutil

        self._psutil, self._me = psutil, psutil.Process()
        if cores is None and _AFFINITY:
            cores = sorted(os.sched_getaffinity(0))
        self._cores = cores
        niced = sys.platform != "win32" and os.getpriority(os.PRIO_PROCESS, 0) > 0
        self._count_nice = niced or _autogroup()

    def __call__(self) -> LoadSample:
        per_cpu = self._psutil.cpu_times(percpu=True)
        if self._cores is not None:
            per_cpu = [per_cpu[i] for i in self._cores if i < len(per_cpu)]
        busy = sum(self._busy(t) for t in per_cpu)
        mine = self._me.cpu_times()
        return LoadSample(time.monotonic(), busy, mine.user + mine.system)

    def _busy(self, t) -> float:
        # Linux's irq, softirq and steal (a hypervisor's); Windows counts its interrupt and DPC
        # time inside system already
        fields = ["user", "system", "irq", "softirq", "steal"]
        if self._count_nice:
            fields.append("nice")
        return sum(getattr(t, f, 0.0) for f in fields)


class ThreadPolicy:
    """The thread count for the next stretch of work; `update()` returns it (cheap to call)."""

    def __init__(
        self,
        cores: int,
        sample: Callable[[], LoadSample],
        *,
        pinned: int | None = None,
        min_interval: float = MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cores, self.pinned = max(1, cores), pinned
        self._sample, self._min_interval, self._clock = sample, min_interval, clock
        self.threads = pinned if pinned else self.cores
        self.others = 0.0  # other programs' load in cores, over the last window
        self.failed = ""  # why the load cannot be read here (the count then stays)
        self._low = 0  # windows in a row light enough to take a thread back
        self._last: LoadSample | None = None if pinned else self._read()

    @property
    def adaptive(self) -> bool:
        return self.pinned is None and not self.failed

    def _read(self) -> LoadSample | None:
        try:
            return self._sample()
        except Exception as e:  # psutil refused (a sandbox, a platform): keep the count
            self.failed = f"{type(e).__name__}: {e}"
            return None

    def update(self) -> int:
        """Sample the load when a window has passed and return the thread count to use."""
        if self._last is None or self._clock() - self._last.at < self._min_interval:
            return self.threads
        now = self._read()
        if now is None:
            self._last = None
            return self.threads
        span = now.at - self._last.at
        if span <= 0:
            return self.threads
        others = ((now.busy - self._last.busy) - (now.own - self._last.own)) / span
        self._last = now
        self.others = min(max(others, 0.0), float(self.cores))
        self.threads = self.choose(self.others)
        return self.threads

    def choose(self, others: float) -> int:
        """Whole cores left free by the others' load, with a band: a thread is dropped as soon
        as the others take more than DROP_AT of the cores it would need, and taken back only
        after REGAIN_WINDOWS windows in a row where their load stays below REGAIN_BELOW of that."""
        n = self.threads
        while n > 1 and others > self.cores - n + DROP_AT:
            n -= 1
        if n < self.threads:
            self._low = 0
            return n
        if n < self.cores and others < self.cores - n - 1 + REGAIN_BELOW:
            self._low += 1
            if self._low >= REGAIN_WINDOWS:
                self._low = 0
                while n < self.cores and others < self.cores - n - 1 + REGAIN_BELOW:
                    n += 1
        else:
            self._low = 0
        return n

    def describe(self) -> str:
        if self.failed:
            return f"{self.threads} threads (the load cannot be read here: {self.failed})"
        if not self.adaptive:
            return f"{self.threads} threads (pinned)"
        return (
            f"{self.threads} of {self.cores} threads (other programs use {self.others:.1f} cores)"
        )
