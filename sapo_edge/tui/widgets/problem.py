"""The error panel: what went wrong and what to do about it (never a traceback)."""

from __future__ import annotations

from textual.widgets import Static

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
        self.update(f"[b]{kind}: {p.title}[/b]\n{p.remedy}")
        self.display = True

    def hide(self) -> None:
        self.problem = None
        self.display = False
