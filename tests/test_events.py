"""One events interface (issue 46): RunEvents has every hook, Forward passes each one on, and
the forwarders (the run's status line, a class member) are Forwards, so a hook reaches the
watcher behind them without any of them naming it; a callback of the old duck-typed kind still
works (its own hooks called, the rest empty)."""

from __future__ import annotations

import pytest

from sapo_edge.classroom.member import ClassMember
from sapo_edge.events import HOOKS, Forward, RunEvents, events
from sapo_edge.run.runner import _NetStatus

ARGS = {
    "on_round": ("report",),
    "on_message": ("node", "text"),
    "on_notice": ("node", "checkpoint saved: /runs/x"),
    "on_phase": ("node", "generating"),
    "on_progress": ("node", "training", 1, 2, 3),
    "on_scored": ("node", 0.5),
    "on_settings": ("node", {"learning_rate": 1e-4}),
    "on_paused": ("node", True),
    "on_run_end": ("node", "done"),
}


class Heard(RunEvents):
    def __init__(self) -> None:
        self.heard: list[str] = []

    def __getattribute__(self, name: str):
        if name in HOOKS:
            return lambda *a: object.__getattribute__(self, "heard").append(name)
        return object.__getattribute__(self, name)


class _Net:
    def describe(self) -> str:
        return "no peers"


class _Report:
    node, round = "n", 0


def test_the_hooks_are_the_interface_s():
    assert set(ARGS) == set(HOOKS) == {k for k in vars(RunEvents) if k.startswith("on_")}


@pytest.mark.parametrize(
    "wrap",
    [Forward, lambda w: _NetStatus(w, _Net()), lambda w: ClassMember(w, None)],
    ids=["forward", "net-status", "class-member"],
)
@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_reaches_the_watcher_through_every_forwarder(wrap, hook):
    watcher = Heard()
    args = ARGS[hook] if hook != "on_round" else (_Report(),)
    if hook in ("on_scored", "on_run_end", "on_paused", "on_phase", "on_progress", "on_settings"):
        args = (_node(),) + args[1:]
    getattr(wrap(watcher), hook)(*args)
    assert hook in watcher.heard


def _node():
    class N:
        round, cfg = 0, type("C", (), {"rounds": 1})()

    return N()


def test_an_old_callback_keeps_its_hooks_and_gets_empty_ones():
    class Old:
        def __init__(self):
            self.rounds = []

        def on_round(self, r):
            self.rounds.append(r)

    old = Old()
    e = events(old)
    e.on_round("r")
    e.on_phase("node", "generating")  # it has none: nothing happens
    e.on_run_end("node", "done")
    assert old.rounds == ["r"] and events(e) is e


def test_settings_taking_effect_reach_the_header_as_an_event():
    """The header's I and J follow settings that took effect (RunEvents.on_settings ->
    SettingsApplied), not the words of the log line that says so."""
    import asyncio

    from tui_recorded import node_started

    from sapo_edge.config.settings import Config
    from sapo_edge.tui.app import SapoDashboard
    from sapo_edge.tui.bridge import TuiCallback
    from sapo_edge.tui.messages import LogLine
    from sapo_edge.tui.widgets.header import NodeHeader

    app = SapoDashboard(Config(name="ada"), start=False)

    async def drive() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            app.post_message(node_started())
            await pilot.pause()
            app.settings["local_samples"], app.settings["external_samples"] = 3, 5
            app.post_message(LogLine("ada: settings applied from this round: x"))  # words only
            await pilot.pause()
            assert "I=3 J=5" not in str(app.query_one(NodeHeader).render())
            TuiCallback(app.post_message).on_settings(None, {"local_samples": 3})
            await pilot.pause()
            assert "I=3 J=5" in str(app.query_one(NodeHeader).render())

    asyncio.run(drive())
