"""The error panel: what went wrong and what to do about it (never a traceback)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...data.textsafe import clean
from ..messages import Problem


class ProblemBanner(Static):
    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.problem: Problem | None = None

    def on_mount(self) -> None:
        self.display = False

    def show(self, p: Problem) -> None:
        self.problem = p
        self.set_class(p.fatal, "fatal")
        kind = "error" if p.fatal else "warning"
        self.update(
            Text.assemble(
                (f"{kind}: {clean(p.title, 200)}", "bold"),
                "\n" + clean(p.remedy, 2000, keep_newlines=True),
            )
        )
        self.display = True

    def hide(self) -> None:
        self.problem = None
        self.display = False
