"""How long the round in flight and the rest of the run will take, from measured speed.

Before the first round has finished: generation from its decode speed so far times the steps
left in the token budget (an upper bound: completions that end early make it shorter), training
from the generation time. After that: the last round's own durations, corrected by live progress.
Plain Python (no Textual), fed by the dashboard's messages.
"""

from __future__ import annotations

from .messages import PhaseProgress, PhaseStarted, RoundDone

TRAIN_PER_GEN = 0.6  # a first round's train step ~ this x its generation (SmolLM2 on CPU)
RECENT = 8  # decode steps in the speed estimate


class RoundClock:
    def __init__(self) -> None:
        self.round = -1
        self.phase = ""
        self.round_started = self.phase_at = 0.0
        self.progress: PhaseProgress | None = None
        self.steps: list[tuple[int, float]] = []  # (decode step, time) of recent progress
        self.gen_seconds: float | None = None  # this round's generation, once it ended
        self.last: RoundDone | None = None

    def start_phase(self, p: PhaseStarted) -> None:
        if p.round != self.round:
            self.round, self.gen_seconds, self.steps = p.round, None, []
            self.round_started = p.round_started
        if self.phase == "generating" and p.phase != "generating":
            self.gen_seconds = p.at - self.phase_at
        self.phase, self.phase_at, self.progress = p.phase, p.at, None

    def add_progress(self, p: PhaseProgress) -> None:
        if p.round != self.round or p.phase != self.phase:
            return
        self.progress = p
        if p.phase == "generating":
            self.steps = (self.steps + [(p.done, p.at)])[-RECENT:]

    def round_done(self, r: RoundDone) -> None:
        self.last = r

    # ------------------------------------------------------------------------- estimates
    def tokens_per_second(self, now: float) -> float | None:
        p = self.progress
        if p is None or p.phase != "generating" or now <= self.phase_at:
            return None
        return p.tokens / (now - self.phase_at)

    def _step_seconds(self) -> float | None:
        if len(self.steps) >= 2:
            (s0, t0), (s1, t1) = self.steps[0], self.steps[-1]
            if s1 > s0:
                return (t1 - t0) / (s1 - s0)
        if self.progress is not None and self.progress.done > 0:  # from the phase start
            return (self.progress.at - self.phase_at) / self.progress.done
        return None

    def _gen_left(self, now: float) -> float | None:
        p, step = self.progress, self._step_seconds()
        if p is None or step is None:
            return None
        bound = (p.total - p.done) * step  # every remaining step as slow as the recent ones
        if self.last is not None:  # the last round's generation is the likelier length
            expected = self.last.gen_seconds - (now - self.phase_at)
            if expected > 0:
                return min(bound, expected)
        return bound

    def _train_guess(self, gen_seconds: float) -> float:
        if self.last is not None:
            return max(0.0, self.last.round_seconds - self.last.gen_seconds)
        return TRAIN_PER_GEN * gen_seconds

    def round_left(self, now: float) -> float | None:
        """Seconds until this round ends, or None while there is nothing to go on yet."""
        elapsed = now - self.round_started
        if self.phase in ("", "sampling"):
            return self.last.round_seconds if self.last is not None else None
        if self.phase == "generating":
            left = self._gen_left(now)
            if left is None:  # no decode step yet (the prompts' prefill)
                return None if self.last is None else max(0.0, self.last.round_seconds - elapsed)
            gen_total = (now - self.phase_at) + left
            return left + self._train_guess(gen_total)
        if self.phase == "training":
            p = self.progress
            if p is not None and p.done > 0:
                return (now - self.phase_at) / p.done * (p.total - p.done)
            guess = self._train_guess(self.gen_seconds or 0.0)
            return max(0.0, guess - (now - self.phase_at))
        # scoring, sharing, saving: short; the training guess is what remains
        if self.last is not None:
            return max(0.0, self.last.round_seconds - elapsed)
        return self._train_guess(self.gen_seconds or 0.0)

    def run_left(self, now: float, rounds_total: int) -> float | None:
        """Seconds until the last round ends: this round plus the rounds after it."""
        left = self.round_left(now)
        if left is None or self.round < 0:
            return None
        per_round = (
            self.last.round_seconds if self.last is not None else (now - self.round_started) + left
        )
        return left + max(0, rounds_total - self.round - 1) * per_round


def duration(seconds: float) -> str:
    """47s, 3m 05s, 2h 40m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"
