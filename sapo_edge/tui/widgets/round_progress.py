"""Round progress: the phase, a bar with ETA, tokens per second and seconds per round."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from ...textsafe import clean
from ...trainer import PHASES
from ..messages import PhaseStarted, RoundDone


class RoundProgress(Vertical):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.rounds_total = 0
        self.last: RoundDone | None = None
        self.phase: PhaseStarted | None = None

    def compose(self) -> ComposeResult:
        yield Static("loading the model...", id="phase")
        yield ProgressBar(total=None, show_eta=False, id="bar")
        yield Static("", id="eta")
        yield Static("", id="speed")

    def on_mount(self) -> None:
        self.border_title = "round"

    def setup_text(self, text: str) -> None:
        """First run: what model loading / download / GGUF conversion is doing now."""
        if self.phase is None:
            line = Text.assemble(("starting", "bold"), " · " + clean(text)[-160:])
            self.query_one("#phase", Static).update(line)

    def start_phase(self, p: PhaseStarted) -> None:
        self.phase = p
        step = PHASES.index(p.phase) if p.phase in PHASES else 0
        total = f"/{self.rounds_total - 1}" if self.rounds_total else ""
        self.query_one("#phase", Static).update(
            Text.assemble("round ", (str(p.round), "bold"), f"{total} · ", (clean(p.phase), "bold"))
        )
        self.query_one(ProgressBar).update(total=len(PHASES) - 1, progress=step)
        if p.expected_seconds is None:
            eta = "ETA: after the first round"
        else:
            eta = f"ETA ~{max(0.0, p.expected_seconds - (p.at - p.round_started)):.0f}s"
        self.query_one("#eta", Static).update(eta)

    def round_done(self, r: RoundDone) -> None:
        self.last = r
        tps = r.gen_tokens / r.gen_seconds if r.gen_seconds > 0 else 0.0
        self.query_one("#speed", Static).update(
            f"{tps:,.0f} tok/s · {r.round_seconds:.1f} s/round\n"
            f"trained {r.local_used} own + {r.external_used} peer groups\n"
            f"received {r.received} · pool {r.pool_size} · loss {r.loss:+.4f}"
        )

    def set_text(self, text: str | Text) -> None:
        """A str is shown as plain text (cleaned); pass a Text for styling."""
        self.query_one("#phase", Static).update(
            text if isinstance(text, Text) else Text(clean(text))
        )
