"""x in the class view: which member to remove from the class (the selected row's name filled
in; Enter removes, Esc cancels); `readmit NAME` in the same box lets a removed member back. h:
the same box for the worked example (HintScreen: `hint NAME` gives it, `unhint NAME` takes it
back)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static


class RemoveScreen(ModalScreen[str | None]):
    """Dismisses with the line typed (a name, or `readmit NAME`), or None."""

    BINDINGS = [("escape", "cancel", "cancel")]
    AUTO_FOCUS = "#remove-name"
    TITLE = "remove a member"
    QUESTION = "Remove this member from the class? (Enter removes, Esc cancels)"
    HELP = (
        "Its classmates stop linking to it and training on its answers, and its laptop is "
        "told. To let a removed member back: readmit NAME."
    )

    def __init__(self, name: str = "") -> None:
        super().__init__()
        self.filled = name

    def compose(self) -> ComposeResult:
        with Vertical(id="remove-box"):
            yield Label(self.QUESTION)
            yield Input(self.filled, id="remove-name", placeholder="a name as the view shows it")
            yield Static(self.HELP, id="remove-help")

    def on_mount(self) -> None:
        self.query_one("#remove-box").border_title = self.TITLE

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HintScreen(RemoveScreen):
    """h: give the selected member the worked example, or take it back (`unhint NAME`)."""

    TITLE = "the worked example"
    QUESTION = "Show this member the worked example? (Enter gives it, Esc cancels)"
    HELP = (
        "Its laptop's next rounds are asked with the worked example, and classmates learn the "
        "format from its answers. unhint NAME takes it back. Once you choose, newcomers no "
        "longer get it by joining first."
    )

    def __init__(self, name: str = "", holds: bool = False) -> None:
        super().__init__(f"unhint {name}" if holds and name else name)
        if holds:
            self.QUESTION = "Take the worked example back? (Enter takes it, Esc cancels)"
