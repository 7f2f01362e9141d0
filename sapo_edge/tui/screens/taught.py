"""t in the class view: what the selected member teaches, the groups of theirs this laptop (the
host) trained on, newest first: the question, each answer and the reward it got here. Every
text was made safe when it was kept (classroom/taught.py); it is drawn as plain text."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def taught_text(name: str, items: list[dict[str, Any]], training: bool = True) -> Text:
    out = Text()
    out.append(f"What {name} teaches", style="bold")
    out.append(": its groups this laptop trained on, newest first (reward here)\n\n", style="dim")
    if not items:
        out.append(
            "none yet: this laptop has trained on no group of theirs (a group teaches only when "
            "its answers scored differently)"
            if training
            else "this laptop does not train (--no-train): it sees no member's groups trained on"
        )
        return out
    for it in items:
        out.append(f"round {it['round'] + 1} · ", style="dim")
        out.append(it["question"] + "\n", style="bold")
        for text, reward in it["answers"]:
            out.append(f"  {reward:.2f}  ", style="green" if reward > 0 else "dim")
            out.append(text.replace("\n", " ⏎ ") + "\n")
        out.append("\n")
    return out


class TaughtScreen(ModalScreen[None]):
    BINDINGS = [("escape", "close", "close"), ("t", "close", "close"), ("q", "close", "close")]

    def __init__(self, name: str, items: list[dict[str, Any]], training: bool = True) -> None:
        super().__init__()
        self.text = taught_text(name, items, training)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="taught-box"):
            yield Static(self.text, markup=False)

    def on_mount(self) -> None:
        self.query_one("#taught-box").border_title = "what this member teaches (Esc closes)"

    def action_close(self) -> None:
        self.dismiss(None)
