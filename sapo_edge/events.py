"""What a run tells whoever watches it (issue 46's one events interface): RunEvents has every
hook, each empty, so a watcher overrides the ones it needs and the trainer, the run loop and
the forwarders call them without asking whether they exist; Forward passes every hook on to an
inner watcher (a forwarder overrides what it adds to and calls super()). A new hook is added
here once and reaches every watcher through Forward.

`events(x)` makes any callback a RunEvents: itself when it is one, else an adapter that calls
the hooks it has (a callback written against the old duck-typed protocol, e.g. in a test)."""

from __future__ import annotations

from typing import Any, Protocol

HOOKS = (
    "on_round",
    "on_message",
    "on_notice",
    "on_phase",
    "on_progress",
    "on_scored",
    "on_settings",
    "on_paused",
    "on_run_end",
)


class NodeView(Protocol):
    """The node a hook names (rl/trainer.py's Node, which this floor cannot import): what every
    watcher may read of it. A watcher above rl/ names Node itself for the rest."""

    name: str
    node_id: str
    round: int  # the round under way (0-based; the run's next one between rounds)


class RunEvents:
    def on_round(self, report: Any) -> None:
        """A round finished: its RoundReport."""

    def on_message(self, node: str, text: str) -> None:
        """A line for people about node `node` (its name)."""

    def on_notice(self, node: str, text: str) -> None:
        """A line the person at the screen should see now (a save, settings that took effect or
        were refused, an open room, a class's note). It is in the run's log already; a watcher
        with a screen may also pop it up (the dashboard's toast), so none reads log words."""

    def on_phase(self, node: NodeView, phase: str) -> None:
        """A new phase of the node's round starts (trainer.PHASES)."""

    def on_progress(self, node: NodeView, phase: str, done: int, total: int, tokens: int) -> None:
        """Inside generating (decode steps of max_new_tokens, tokens so far) and training
        (micro-batches)."""

    def on_scored(self, node: NodeView, reward: float) -> None:
        """The round's own answers are scored (their mean reward), before the train step."""

    def on_settings(self, node: NodeView, applied: dict[str, Any]) -> None:
        """Settings changed during the run took effect from this round (name -> value)."""

    def on_paused(self, node: NodeView, parked: bool) -> None:
        """The run loop waits in pause (True) or goes on (False)."""

    def on_run_end(self, node: NodeView, outcome: str) -> None:
        """The run ended ("done", "stopped", "failed"), before the network closes."""


class Forward(RunEvents):
    """Every hook passed on to `inner`."""

    def __init__(self, inner: Any) -> None:
        self.inner = events(inner)

    def on_round(self, report: Any) -> None:
        self.inner.on_round(report)

    def on_message(self, node: str, text: str) -> None:
        self.inner.on_message(node, text)

    def on_notice(self, node: str, text: str) -> None:
        self.inner.on_notice(node, text)

    def on_phase(self, node: NodeView, phase: str) -> None:
        self.inner.on_phase(node, phase)

    def on_progress(self, node: NodeView, phase: str, done: int, total: int, tokens: int) -> None:
        self.inner.on_progress(node, phase, done, total, tokens)

    def on_scored(self, node: NodeView, reward: float) -> None:
        self.inner.on_scored(node, reward)

    def on_settings(self, node: NodeView, applied: dict[str, Any]) -> None:
        self.inner.on_settings(node, applied)

    def on_paused(self, node: NodeView, parked: bool) -> None:
        self.inner.on_paused(node, parked)

    def on_run_end(self, node: NodeView, outcome: str) -> None:
        self.inner.on_run_end(node, outcome)


class _Adapted(RunEvents):
    """A callback that is no RunEvents: its own hooks, the empty ones where it has none."""

    def __init__(self, callback: Any) -> None:
        self.callback = callback
        for hook in HOOKS:
            fn = getattr(callback, hook, None)
            if fn is not None:
                setattr(self, hook, fn)


def events(callback: Any) -> RunEvents:
    return callback if isinstance(callback, RunEvents) else _Adapted(callback)
