"""The dashboard: header, reward chart, round progress, per-domain and peers tables, rollouts feed.

Training runs in a thread worker (`runner.run_single` with a TuiCallback and a RunControl) and
reaches the UI only through the dataclass messages of messages.py.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Footer, RichLog

from ..config import Config
from ..control import RunControl
from ..textsafe import clean
from .bridge import TuiCallback
from .messages import (
    LogLine,
    NodeStarted,
    Parked,
    PeersUpdated,
    PhaseStarted,
    Problem,
    RolloutsSeen,
    RoundDone,
    RunEnded,
)
from .remedies import explain
from .screens.help import HelpScreen
from .screens.settings import SettingsScreen
from .widgets.header import NodeHeader
from .widgets.problem import ProblemBanner
from .widgets.reward_chart import RewardChart
from .widgets.rollouts import RolloutFeed
from .widgets.round_progress import RoundProgress
from .widgets.tables import DomainTable, PeersTable

NOTIFY_PREFIXES = ("checkpoint saved", "settings", "network settings", "room", "relay")


def _run_single(cfg: Config, callback: Any, log: Callable[[str], None], control: RunControl) -> Any:
    from ..runner import run_single  # torch loads here, on the worker thread

    return run_single(cfg, callback, log, control)


class SapoDashboard(App[str]):
    CSS_PATH = Path(__file__).with_name("styles.tcss")
    TITLE = "sapo-edge"
    BINDINGS = [
        Binding("p", "pause", "pause/resume"),
        Binding("s", "save", "save now"),
        Binding("c", "settings", "settings"),
        Binding("l", "toggle_log", "log"),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit_saving", "quit"),
    ]

    def __init__(
        self,
        cfg: Config,
        *,
        start: bool = True,
        control: RunControl | None = None,
        run: Callable[..., Any] = _run_single,
    ) -> None:
        super().__init__()
        self.cfg, self.start, self.run_fn = cfg, start, run
        self.control = control or RunControl()
        self.control.on_park = lambda parked: self.post_message(Parked(parked))
        self.running = False
        self.quitting = False
        self.outcome = ""
        self.rounds_done = 0
        self.settings = {
            "local_samples": cfg.local_samples,
            "external_samples": cfg.external_samples,
            "room": getattr(cfg, "room", ""),
            "relay": getattr(cfg, "relay", ""),
        }

    def compose(self) -> ComposeResult:
        yield NodeHeader(id="header")
        yield ProblemBanner(id="problem")
        with Horizontal(id="top"):
            yield RewardChart(id="chart")
            yield RoundProgress(id="progress")
        with Horizontal(id="middle"):
            yield DomainTable(id="domains")
            yield PeersTable(id="peers")
        yield RolloutFeed(id="rollouts")
        yield RichLog(id="log", wrap=True, markup=False, max_lines=2000)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log").display = False
        self.query_one("#log").border_title = "log"
        self.query_one(RoundProgress).rounds_total = self.cfg.rounds
        self.begin_capture_print(self)  # library output (download bars, warnings) -> log pane
        if self.start:
            self.running = True
            self.train()

    def on_unmount(self) -> None:
        self.control.request_stop()  # however the app ends, a parked or running loop stops and saves

    # ------------------------------------------------------------------ the worker
    @work(thread=True, exclusive=True, name="training")
    def train(self) -> None:
        post = self.post_message
        outcome = "done"
        try:
            self.run_fn(self.cfg, TuiCallback(post), lambda t: post(LogLine(t)), self.control)
            if self.control.stop_requested():
                outcome = "stopped"
        except Exception as e:
            title, remedy = explain(e, self.cfg.out_dir)
            post(Problem(title, remedy, fatal=True, detail=traceback.format_exc()))
            outcome = "failed"
        post(RunEnded(outcome))

    # ---------------------------------------------------------------- messages in
    def on_node_started(self, m: NodeStarted) -> None:
        self.query_one(NodeHeader).show(m)
        self.settings.update(
            local_samples=m.local_samples, external_samples=m.external_samples, room=m.room
        )

    def on_phase_started(self, m: PhaseStarted) -> None:
        self.query_one(RoundProgress).start_phase(m)

    def on_round_done(self, m: RoundDone) -> None:
        self.rounds_done += 1
        self.query_one(RewardChart).add(m.round, m.reward_mean, m.swarm_reward)
        self.query_one(DomainTable).add_round(m.reward_by_domain)
        self.query_one(RoundProgress).round_done(m)
        self.query_one(NodeHeader).set_memory(m.memory_mb)
        banner = self.query_one(ProblemBanner)
        if m.received and banner.problem is not None and not banner.problem.fatal:
            banner.hide()  # "no peers yet" is over

    def on_peers_updated(self, m: PeersUpdated) -> None:
        self.query_one(PeersTable).show(m.peers, m.now, m.source)

    def on_rollouts_seen(self, m: RolloutsSeen) -> None:
        self.query_one(RolloutFeed).add(m.rollouts)

    def on_log_line(self, m: LogLine) -> None:
        self.query_one(RichLog).write(Text(clean(m.text, keep_newlines=True)))
        self.query_one(RoundProgress).setup_text(m.text)
        body = m.text.split(": ", 1)[-1] if m.text.startswith(self.cfg.name) else m.text
        if body.startswith(NOTIFY_PREFIXES):
            self.notify(clean(body, 300), timeout=6, markup=False)
        if body.startswith("settings applied"):
            self.query_one(NodeHeader).set_samples(
                self.settings["local_samples"], self.settings["external_samples"]
            )

    def on_print(self, event: events.Print) -> None:
        """Captured stdout/stderr: the latest piece shows as setup progress (e.g. a Hugging Face
        download bar, which redraws itself with carriage returns); whole lines go to the log."""
        pieces = [p.strip() for p in event.text.replace("\r", "\n").split("\n") if p.strip()]
        if pieces:
            self.query_one(RoundProgress).setup_text(pieces[-1])
        if event.text.endswith("\n") and "\r" not in event.text and pieces:
            self.query_one(RichLog).write(Text(clean("\n".join(pieces), keep_newlines=True)))

    def on_problem(self, m: Problem) -> None:
        self.query_one(ProblemBanner).show(m)
        if m.detail:
            self.query_one(RichLog).write(Text(clean(m.detail, keep_newlines=True)))
        if m.fatal:
            self.query_one(NodeHeader).set_state("stopped")
            stopped = Text.assemble(("stopped", "bold red"), " · " + clean(m.title, 200))
            self.query_one(RoundProgress).set_text(stopped)

    def on_parked(self, m: Parked) -> None:
        self.query_one(NodeHeader).set_state("paused" if m.parked else "running")

    def on_run_ended(self, m: RunEnded) -> None:
        self.running, self.outcome = False, m.outcome
        if m.outcome != "failed":
            self.query_one(NodeHeader).set_state(m.outcome)
            self.query_one(RoundProgress).set_text(
                Text.assemble(
                    (m.outcome, "bold"),
                    f" after {self.rounds_done} rounds · checkpoint saved · q quits",
                )
            )
        if self.quitting:
            self.exit(m.outcome)

    # -------------------------------------------------------------------- actions
    def action_pause(self) -> None:
        if not self.running:
            return
        paused = self.control.toggle_pause()
        self.query_one(NodeHeader).set_state("pausing after this round" if paused else "running")

    def action_save(self) -> None:
        if self.running:
            self.control.request_save()
            self.notify("a checkpoint will be saved before the next round")

    def action_toggle_log(self) -> None:
        log = self.query_one("#log")
        log.display = not log.display

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_settings(self) -> None:
        self.push_screen(SettingsScreen(dict(self.settings)), self._settings_chosen)

    def _settings_chosen(self, changed: dict[str, Any] | None) -> None:
        if not changed:
            return
        self.settings.update(changed)
        self.control.update(**changed)
        self.notify("settings will apply from the next round: " + ", ".join(changed))

    def action_quit_saving(self) -> None:
        if not self.running:
            self.exit(self.outcome or "quit")
            return
        if self.quitting:
            self.notify("still stopping: the round in flight ends at its next phase, then it saves")
            return
        self.quitting = True
        self.control.request_stop()
        self.query_one(NodeHeader).set_state("stopping, then saving")


def run_dashboard(cfg: Config) -> int:
    """`sapo-edge` in a terminal: open the dashboard and train until done or quit."""
    cfg = dataclasses.replace(cfg)
    outcome = SapoDashboard(cfg).run()
    return 1 if outcome == "failed" else 0
