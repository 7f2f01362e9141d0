"""The settings screen: I/J samples per round, applied from the next round. Room and relay are
shown with how to change them (a restart), since the running transport cannot switch."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

RELAY_EXAMPLE = "ws://HOST:7745"  # `sapo-edge relay` listens on 7745 by default


def network_text(fixed: dict[str, Any]) -> Text:
    """The settings that only a restart changes, and how."""
    text = Text()
    if fixed.get("solo"):
        text.append("network: off (--solo)\n", style="bold")
    else:
        text.append("room: ", style="bold")
        text.append(f"{fixed.get('room') or 'default'}   ")
        text.append("relay: ", style="bold")
        text.append(f"{fixed.get('relay') or 'none'}\n")
    text.append(
        "These cannot change while running: quit (q), then run the command printed on exit with "
        f"--room NAME or --relay {RELAY_EXAMPLE}.",
        style="dim",
    )
    return text


class SettingsScreen(ModalScreen[dict[str, Any] | None]):
    """Dismisses with the changed settings (Config field names), or None."""

    BINDINGS = [("escape", "cancel", "cancel")]

    def __init__(self, current: dict[str, Any], fixed: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.current, self.fixed = current, fixed or {}

    def compose(self) -> ComposeResult:
        c = self.current
        with Vertical(id="settings-box"):
            yield Label("I: own groups trained on per round")
            yield Input(str(c["local_samples"]), id="local_samples", type="integer")
            yield Label("J: peer groups trained on per round (0 = train alone)")
            yield Input(str(c["external_samples"]), id="external_samples", type="integer")
            yield Static(network_text(self.fixed), id="settings-network")
            yield Static("", id="settings-error")
            with Horizontal(id="settings-buttons"):
                yield Button("apply from next round", id="apply", variant="primary")
                yield Button("cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#settings-box").border_title = "settings"

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self._apply()

    def on_input_submitted(self) -> None:
        self._apply()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _apply(self) -> None:
        changed: dict[str, Any] = {}
        for key in ("local_samples", "external_samples"):
            raw = self.query_one(f"#{key}", Input).value.strip()
            if not raw.isdigit():
                self.query_one("#settings-error", Static).update(
                    f"[red]{key.replace('_', ' ')} must be a whole number, 0 or more[/]"
                )
                return
            if int(raw) != self.current[key]:
                changed[key] = int(raw)
        if (
            changed.get("local_samples", self.current["local_samples"])
            + changed.get("external_samples", self.current["external_samples"])
            == 0
        ):
            self.query_one("#settings-error", Static).update(
                "[red]I and J are both 0: nothing to train on; raise one of them[/]"
            )
            return
        self.dismiss(changed)
