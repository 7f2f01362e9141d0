"""x in the class view: which member to remove from the class (the selected row's name filled
in; Enter removes, Esc cancels); `readmit NAME` in the same box lets a removed member back."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static


class RemoveScreen(ModalScreen[str | None]):
    """Dismisses with the line typed (a name, or `readmit NAME`), or None."""

    BINDINGS = [("escape", "cancel", "cancel")]
    AUTO_FOCUS = "#remove-name"

    def __init__(self, name: str = "") -> None:
        super().__init__()
        self.filled = name

    def compose(self) -> ComposeResult:
        with Vertical(id="remove-box"):
            yield Label("Remove this member from the class? (Enter removes, Esc cancels)")
            yield Input(self.filled, id="remove-name", placeholder="a name as the view shows it")
            yield Static(
                "Its classmates stop linking to it and training on its answers, and its laptop is "
                "told. To let a removed member back: readmit NAME.",
                id="remove-help",
            )

    def on_mount(self) -> None:
        self.query_one("#remove-box").border_title = "remove a member"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
