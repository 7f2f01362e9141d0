"""Round progress: the phase, tokens (or micro-batches) done with a bar, tokens per second, ETA
of the round and of the run, and the last round's figures. Rounds show 1-based: "round 1 of 100"."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from ...data.textsafe import clean
from ..eta import RoundClock, duration
from ..messages import PhaseProgress, PhaseStarted, RoundDone


class RoundProgress(Vertical):
    def __init__(self, clock: Callable[[], float] = time.time, **kw) -> None:
        super().__init__(**kw)
        self.clock = clock
        self.rounds_total = 0
        self.last: RoundDone | None = None
        self.phase: PhaseStarted | None = None
        self.eta = RoundClock()
        self.stopped = False

    def compose(self) -> ComposeResult:
        yield Static("loading the model...", id="phase")
        yield ProgressBar(total=None, show_eta=False, id="round-bar")
        yield Static("", id="work")
        yield Static("", id="eta")
        yield Static("", id="speed")

    def on_mount(self) -> None:
        self.border_title = "round"
        self.set_interval(1.0, self._show_eta)  # the ETA counts down between messages

    def setup_text(self, text: str) -> None:
        """First run: what model loading / download / GGUF conversion is doing now."""
        if self.phase is None and not self.stopped:
            said = clean(text)  # a long one loses its middle (a path), never its first words
            said = said if len(said) <= 160 else f"{said[:70]}...{said[-87:]}"
            line = Text.assemble(("starting", "bold"), " · " + said)
            self.query_one("#phase", Static).update(line)

    def _round_label(self, round_: int) -> Text:
        of = f" of {self.rounds_total}" if self.rounds_total else ""
        return Text.assemble("round ", (str(round_ + 1), "bold"), of)

    def start_phase(self, p: PhaseStarted) -> None:
        self.phase = p
        self.eta.start_phase(p)
        if self.stopped:
            return
        self.query_one("#phase", Static).update(
            Text.assemble(self._round_label(p.round), " · ", (clean(p.phase), "bold"))
        )
        if p.phase in ("generating", "training"):
            self.query_one(ProgressBar).update(total=None, progress=0)
            self.query_one("#work", Static).update("starting..." if p.phase == "generating" else "")
        self._show_eta()

    def add_progress(self, p: PhaseProgress) -> None:
        self.eta.add_progress(p)
        if self.stopped:
            return
        bar, work = self.query_one(ProgressBar), self.query_one("#work", Static)
        if p.phase == "generating":
            budget = p.rows * p.total
            bar.update(total=max(p.total, 1), progress=p.done)
            tps = self.eta.tokens_per_second(p.at)
            speed = f" · {tps:,.0f} tok/s" if tps else ""
            work.update(
                f"{p.tokens:,}/{budget:,} tokens{speed}\n"
                f"step {p.done}/{p.total} · {p.finished}/{p.rows} ended"
            )
        else:
            bar.update(total=max(p.total, 1), progress=p.done)
            work.update(f"micro-batch {min(p.done + 1, p.total)} of {p.total}")
        self._show_eta()

    def _show_eta(self) -> None:
        if self.stopped or self.phase is None:
            return
        now = self.clock()
        left = self.eta.round_left(now)
        if left is None:
            text = "ETA: measuring decode speed..."
        else:
            text = f"round ~{duration(left)} left"
            run = self.eta.run_left(now, self.rounds_total)
            if run is not None and self.rounds_total - self.eta.round > 1:
                text += f" · all ~{duration(run)}"
        self.query_one("#eta", Static).update(text)

    def round_done(self, r: RoundDone) -> None:
        self.last = r
        self.eta.round_done(r)
        tps = r.gen_tokens / r.gen_seconds if r.gen_seconds > 0 else 0.0
        chose = "" if r.external_target is None else f" (adaptive: J={r.external_target})"
        unused = ", unused (J=0)" if r.external_none and r.received else ""
        self.query_one("#speed", Static).update(
            f"\nlast round {duration(r.round_seconds)} · {tps:,.0f} tok/s\n"
            f"trained {r.local_used} own + {r.external_used} peer groups{chose}\n"
            f"received {r.received}{unused} · pool {r.pool_size} · loss {r.loss:+.4f}"
        )

    def set_text(self, text: str | Text) -> None:
        """The run has ended (or cannot go on): one line instead of the live progress. A str is
        shown as plain text (cleaned); pass a Text for styling."""
        self.stopped = True
        self.query_one("#phase", Static).update(
            text if isinstance(text, Text) else Text(clean(text))
        )
        self.query_one("#work", Static).update("")
        self.query_one("#eta", Static).update("")
        self.query_one(ProgressBar).display = False  # it would keep the last phase's 50%
