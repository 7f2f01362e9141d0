"""The rollouts feed: recent questions with one completion, its reward and origin; Ahas marked."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ...data.textsafe import clean
from ..messages import Rollout

KEEP = 40


def one_line(text: str, width: int) -> Text:
    """A completion, question or peer name as one line of plain text (never markup)."""
    flat = " ".join(clean(text).split())
    return Text(flat if len(flat) <= width else flat[: width - 1] + "…")


class RolloutFeed(DataTable):
    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="none", zebra_stripes=True, **kw)
        self.items: list[Rollout] = []
        self.ahas = 0

    def on_mount(self) -> None:
        self.border_title = "rollouts (newest first)"
        self.add_columns("rnd", "origin", "reward", "", "question", "completion")

    def add(self, rollouts: list[Rollout]) -> None:
        self.items = (list(reversed(rollouts)) + self.items)[:KEEP]
        self.ahas += sum(r.aha for r in rollouts)
        self.border_title = f"rollouts (newest first) · {self.ahas} Aha"
        self.clear()
        for r in self.items:
            colour = "green" if r.reward > 0 else "red"
            self.add_row(
                str(r.round + 1),  # rounds show 1-based
                one_line(r.origin, 18),
                Text(f"{r.reward:.2f}", style=colour),
                Text("Aha!", style="bold yellow") if r.aha else "",
                one_line(r.question, 38),
                one_line(r.completion, 44),
            )
