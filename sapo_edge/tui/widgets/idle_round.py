"""The "this round trained nothing" panel: why, and what to change; hidden once a round trains."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ..messages import NothingTrained, RoundDone


class IdleRound(Static):
    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.rounds: list[int] = []  # consecutive rounds that trained nothing (0-based)

    def on_mount(self) -> None:
        self.display = False

    def show(self, m: NothingTrained) -> None:
        self.rounds.append(m.round)
        span = (
            f"round {m.round + 1}"
            if len(self.rounds) == 1
            else f"rounds {self.rounds[0] + 1}-{m.round + 1}"
        )
        text = Text()
        text.append(f"{span} trained nothing: ", style="bold")
        text.append(m.why)
        text.append("\nwhat to change: ", style="bold")
        text.append(m.fix)
        self.update(text)
        self.display = True

    def round_done(self, r: RoundDone) -> None:
        if r.local_used + r.external_used > 0:
            self.rounds = []
            self.display = False
