"""Pause, save-now, stop and new settings for a running node, shared by headless runs and the TUI.

The UI thread calls pause()/resume()/request_save()/request_stop()/update(); the training loop
calls `between_rounds(node)` before each round and uses `stop_requested` as the node's stop check.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config.loading import fields_where
from ..config.settings import Config, ConfigError
from ..events import events
from ..rl.trainer import RoundStopped

if TYPE_CHECKING:
    from ..rl.trainer import Node


class RunControl:
    def __init__(self, paused: bool = False) -> None:
        self._cond = threading.Condition()
        self._paused = paused
        self._stop = False
        self._save = False
        self._pending: dict[str, Any] = {}
        self.parked = threading.Event()  # set while the loop waits in pause (tests and UI read it)
        self.on_park: Callable[[bool], None] | None = None  # told when the loop parks / leaves
        # what the exit summary reads once the loop has ended (set by run_rounds)
        self.node: Node | None = None
        self.start_round = 0
        # the command that continues this run, when its session knows its own (a class
        # member's `sapo-edge join CODE ...`); None: the summary makes a `run --resume` one
        self.again: Callable[..., str] | None = None
        self.outcome = ""  # "done" | "stopped" | "failed" ("" while running)

    # ------------------------------------------------------------------ UI side
    def pause(self) -> None:
        with self._cond:
            self._paused = True

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def toggle_pause(self) -> bool:
        """Flip pause; returns True when now paused."""
        with self._cond:
            self._paused = not self._paused
            self._cond.notify_all()
            return self._paused

    def request_save(self) -> None:
        with self._cond:
            self._save = True
            self._cond.notify_all()

    def request_stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def update(self, **settings: Any) -> None:
        """New settings (Config field names; others such as room/relay go to the transport)."""
        with self._cond:
            self._pending.update(settings)
            self._cond.notify_all()

    def pending_settings(self) -> dict[str, Any]:
        """Settings waiting for the next round."""
        with self._cond:
            return dict(self._pending)

    @property
    def paused(self) -> bool:
        return self._paused

    def stop_requested(self) -> bool:
        return self._stop

    # --------------------------------------------------------------- loop side
    def between_rounds(self, node: Node, log: Callable[[str], None]) -> bool:
        """Save / apply settings as asked, wait while paused; False when the loop should stop."""
        while True:
            with self._cond:
                save, self._save = self._save, False
                pending, self._pending = self._pending, {}
            if pending:
                change_settings(node, pending, log)
            if save:
                tell(node, log, f"checkpoint saved: {node.save()}")
            with self._cond:
                if self._stop:
                    if self.parked.is_set():
                        self._park(False)
                    return False
                if self._save or self._pending:
                    continue
                if not self._paused:
                    if self.parked.is_set():
                        self._park(False)
                    return True
                if not self.parked.is_set():
                    self._park(True)
                self._cond.wait()

    def _park(self, parked: bool) -> None:
        (self.parked.set if parked else self.parked.clear)()
        if self.on_park is not None:
            self.on_park(parked)


# Rounds of a session whose seconds teach pace.py this machine's speed (the first ones, while
# the estimate matters; later ones would only rewrite the file)
LEARN_ROUNDS = 3

# Settings the transport owns: a restart with the new value changes them, never an edit of the
# running config.
NETWORK_SETTINGS = fields_where(Config, "when", "network")  # (config/settings.py)


def tell(node: Node, log: Callable[[str], None], text: str) -> None:
    """A line for the run's log that the person at the screen should also see now: the node's
    watchers hear it as a notice (the dashboard pops it up; nothing reads the log's words)."""
    log(text)
    events(node.callback).on_notice(node.name, text)


def change_settings(node: Node, settings: dict[str, Any], log: Callable[[str], None]) -> None:
    """The person's new settings, to a node from its next round: Node.configure hands them to
    the trainer, the reward, the peer pool, the backend and config.json (rl/node_settings.py's
    apply_settings: learning rate, temperature...); a bad
    value, or a setting only a restart can change (model, LoRA shape, seed...), is refused whole
    with the reason."""
    fields = {f.name for f in dataclasses.fields(Config)} - NETWORK_SETTINGS
    known = {k: v for k, v in settings.items() if k in fields}
    other = {k: v for k, v in settings.items() if k not in fields}
    if known:
        try:
            node.configure(known)
        except ConfigError as e:
            tell(node, log, f"settings not applied: {e}")
        else:
            tell(
                node,
                log,
                "settings applied from this round: "
                + ", ".join(f"{k}={v}" for k, v in known.items()),
            )
            events(node.callback).on_settings(node, dict(known))
    if other:  # no transport switches its network while running (issue 55: the probe for a
        # reconfigure() that none has read like a feature)
        tell(
            node,
            log,
            f"{', '.join(other)}: this node's transport ({node.transport.describe()}) cannot "
            "switch while running; restart sapo-edge with the new setting.",
        )


def run_rounds(
    node: Node, rounds: int, control: RunControl | None, log: Callable[[str], None]
) -> str:
    """The one training loop of a single node: rounds until `rounds` or a stop, then the newest
    complete state is saved (save_newest).

    Returns "done" or "stopped". A stop request abandons the round in flight at its next phase
    boundary, decode step or micro-batch (nothing of it is kept) and still saves.
    """
    control = control or RunControl()
    control.node, control.start_round, control.outcome = node, node.round, ""
    node.stop_check = control.stop_requested
    told = _tell_callback(node, control)
    outcome = "done"
    try:
        while node.round < rounds:
            if not control.between_rounds(node, log):
                outcome = "stopped"
                break
            try:
                report = node.run_round()
            except RoundStopped as e:
                log(f"{e}; saving")
                outcome = "stopped"
                break
            if node.round - control.start_round <= LEARN_ROUNDS:
                learn = getattr(node.backend, "learn_pace", None)  # torch on the CPU only
                if learn is not None:
                    learn(node.cfg, node.model_id, report)
        save_newest(node, log)
    except BaseException:
        control.outcome = "failed"
        told("failed")
        raise
    control.outcome = outcome
    told(outcome)
    return outcome


def _tell_callback(node: Node, control: RunControl) -> Callable[[str], None]:
    """The node's callback hears (optionally) when the loop parks in pause and leaves it
    (`on_paused(node, parked)`, beside the UI's own on_park) and how the run ended
    (`on_run_end(node, outcome)`, before the network closes): a class member says so."""
    callback = events(node.callback)  # a Node's is one already
    ui = control.on_park

    def parked(now: bool) -> None:
        if ui is not None:
            ui(now)
        callback.on_paused(node, now)

    control.on_park = parked
    return lambda outcome: callback.on_run_end(node, outcome)


def save_newest(node: Node, log: Callable[[str], None]) -> Any:
    """Checkpoint the last finished round unless it is saved already; returns the newest
    checkpoint of this run, or None when no round has finished (nothing worth saving)."""
    if node.saved is not None and node.saved[0] == node.round:
        return node.saved[1]
    if node.round == 0:
        return None
    path = node.save()
    tell(node, log, f"checkpoint saved: {path}")
    return path
