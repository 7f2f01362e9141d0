"""The settings screen: I/J samples per round, room and relay; applied from the next round."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


class SettingsScreen(ModalScreen[dict[str, Any] | None]):
    """Dismisses with the changed settings (Config field names, plus room / relay), or None."""

    BINDINGS = [("escape", "cancel", "cancel")]

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        c = self.current
        with Vertical(id="settings-box"):
            yield Label("I: own groups trained on per round")
            yield Input(str(c["local_samples"]), id="local_samples", type="integer")
            yield Label("J: peer groups trained on per round (0 = train alone)")
            yield Input(str(c["external_samples"]), id="external_samples", type="integer")
            yield Label("room (peers in the same room train together)")
            yield Input(str(c.get("room") or ""), id="room", placeholder="e.g. physics-lab")
            yield Label("relay (host:port, for peers outside this network)")
            yield Input(
                str(c.get("relay") or ""), id="relay", placeholder="e.g. relay.example.org:7447"
            )
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
        for key in ("room", "relay"):
            value = self.query_one(f"#{key}", Input).value.strip()
            if value != str(self.current.get(key) or ""):
                changed[key] = value
        self.dismiss(changed)
