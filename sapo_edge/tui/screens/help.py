"""The help screen: keys and what each panel shows."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]Keys[/b]
  p   pause / resume (the round in flight finishes first)
  s   save a checkpoint now (before the next round)
  c   settings: I/J samples (from the next round); how to change room and relay
  l   show / hide the log pane
  ?   this help
  q   quit: stops the round in flight within seconds, saves the last finished
      round, then prints a summary and the command that continues the run
      (also ctrl+q, ctrl+c, SIGTERM, SIGHUP; the third q quits without waiting)

[b]Panels[/b]
  reward per round   this node's mean reward, its 5-round average, and the mean reward
                     peers claimed for the groups they sent (this node re-scores them
                     itself before training on any)
  round              phase, tokens generated of the budget (or micro-batches trained),
                     tokens per second, time left in the round and the run (first
                     round: estimated from the decode speed), the last round's figures
  reward per domain  the first 5 rounds against the last 5: is it learning?
  peers              who sent rollouts: groups received, accepted, rejected and the
                     top reason (decode errors, duplicates, ...)
  rollouts           one completion per question, its reward (this node's verifier)
                     and origin; [b yellow]Aha![/] marks a peer's completion that was right
                     where all of this node's own completions in that domain failed

Headless: `sapo-edge run --headless` prints one line per round instead.
[dim]esc, q or ? closes this screen[/dim]"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        ("escape", "close", "close"),
        ("q", "close", "close"),
        ("question_mark", "close", "close"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(HELP, id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-box").border_title = "sapo-edge help"

    def action_close(self) -> None:
        self.dismiss(None)
