"""The dashboard: header, reward chart, round progress, per-domain and peers tables, rollouts feed.

Training runs in a thread worker (`runner.run_single` with a TuiCallback and a RunControl) and
reaches the UI only through the dataclass messages of messages.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import tempfile
import threading
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

from ..config.settings import Config
from ..data.textsafe import clean
from ..run.control import RunControl
from ..run.remedies import explain, unexpected
from ..run.stopping import exit_code, stop_signals
from ..run.summary import exit_summary
from .bridge import NO_PEERS_TITLE, TuiCallback
from .messages import (
    LogLine,
    NodeStarted,
    NothingTrained,
    Notice,
    Parked,
    PathChanged,
    PeersUpdated,
    PhaseProgress,
    PhaseStarted,
    Problem,
    ProblemCleared,
    RolloutsSeen,
    RoundDone,
    RoundScored,
    RunEnded,
    SettingsApplied,
)
from .screens.help import HelpScreen
from .screens.settings import SettingsScreen
from .widgets.header import NodeHeader
from .widgets.idle_round import IdleRound
from .widgets.problem import ProblemBanner
from .widgets.reward_chart import RewardChart
from .widgets.rollouts import RolloutFeed
from .widgets.round_progress import RoundProgress
from .widgets.tables import DomainTable, PeersTable

FORCE_AFTER = 3  # the third q (or second stop signal) quits without waiting for the save
# After a stop signal: how long the training thread may take to stop and save, then how long the
# terminal teardown may take (after a hangup Textual can block writing to a terminal that is
# gone) before the process ends anyway; the checkpoint is on disk by then.
SAVE_WAIT, TEARDOWN_WAIT = 300.0, 5.0


def _run_single(cfg: Config, callback: Any, log: Callable[[str], None], control: RunControl) -> Any:
    from ..run.runner import run_single  # torch loads here, on the worker thread

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
        # Textual's own ctrl+q quit would leave the training thread running on behind a blank
        # screen; ctrl+c (a key here, not SIGINT) would only say "press ctrl+q": both stop cleanly
        Binding("ctrl+q", "quit_saving", "quit", show=False, priority=True),
        Binding("ctrl+c", "quit_saving", "quit", show=False),
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
        self.quit_presses = 0
        self.forced = False  # quit without waiting for the training thread
        self.signals: list[str] = []  # stop signals received (SIGTERM, SIGHUP, SIGINT)
        self.fatal: Problem | None = None  # the error that ended the run, printed after exit
        self.outcome = ""
        self.rounds_done = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.training_done = threading.Event()  # the worker has returned (saved or failed)
        self.exited = threading.Event()  # app.run() has returned: the terminal is restored
        self.on_stuck: Callable[[], None] | None = None  # run_dashboard's way out (os._exit)
        self.settings = {
            "local_samples": cfg.local_samples,
            "external_samples": cfg.external_samples,
        }

    def compose(self) -> ComposeResult:
        yield NodeHeader(id="header")
        yield ProblemBanner(id="problem")
        yield IdleRound(id="idle")
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
        self._loop = asyncio.get_running_loop()
        self.query_one("#log").display = False
        self.query_one("#log").border_title = "log"
        self.query_one(RoundProgress).rounds_total = self.cfg.rounds
        self.begin_capture_print(self)  # library output (download bars, warnings) -> log pane
        if self.start:
            self.running = True
            self.train()
        if self.signals:  # a signal came while the app was starting
            self._on_stop_signal(self.signals[-1])

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
            detail = traceback.format_exc()
            title, remedy = explain(e, self.cfg.out_dir)
            after = ""
            if unexpected(e):  # the log pane holding its traceback goes with the dashboard
                kept = _keep_traceback(detail)
                after = explain(e, self.cfg.out_dir, kept)[1] if kept else ""
            post(Problem(title, remedy, fatal=True, detail=detail, after=after))
            outcome = "failed"
        finally:
            self.training_done.set()
        post(RunEnded(outcome))

    # ---------------------------------------------------------------- messages in
    def on_node_started(self, m: NodeStarted) -> None:
        self.query_one(NodeHeader).show(m)
        if m.history:  # a resumed run: the chart starts from its earlier rounds
            self.query_one(RewardChart).load(m.history)
        self.settings.update(
            local_samples=m.local_samples, external_samples=m.external_samples, room=m.room
        )

    def on_phase_started(self, m: PhaseStarted) -> None:
        self.query_one(RoundProgress).start_phase(m)

    def on_phase_progress(self, m: PhaseProgress) -> None:
        self.query_one(RoundProgress).add_progress(m)

    def on_nothing_trained(self, m: NothingTrained) -> None:
        self.query_one(IdleRound).show(m)

    def on_round_scored(self, m: RoundScored) -> None:
        self.query_one(RewardChart).add(m.round, m.reward_mean, None)  # before the train step

    def on_round_done(self, m: RoundDone) -> None:
        self.rounds_done += 1
        self.query_one(RewardChart).add(m.round, m.reward_mean, m.swarm_reward)
        self.query_one(DomainTable).add_round(m.reward_by_domain)
        self.query_one(RoundProgress).round_done(m)
        self.query_one(IdleRound).round_done(m)
        self.query_one(NodeHeader).set_memory(m.memory_mb)
        banner = self.query_one(ProblemBanner)
        if m.received and banner.problem is not None and banner.problem.title == NO_PEERS_TITLE:
            banner.hide()  # "no peers yet" is over (other warnings, e.g. the class ended, stay)

    def on_peers_updated(self, m: PeersUpdated) -> None:
        self.query_one(PeersTable).show(m.peers, m.now, m.source)

    def on_rollouts_seen(self, m: RolloutsSeen) -> None:
        self.query_one(RolloutFeed).add(m.rollouts)

    def on_log_line(self, m: LogLine) -> None:
        self.query_one(RichLog).write(Text(clean(m.text, keep_newlines=True)))
        self.query_one(RoundProgress).setup_text(m.text)

    def on_notice(self, m: Notice) -> None:
        """A line the run asked to pop up (RunEvents.on_notice), not one picked by its words."""
        self.notify(clean(m.text, 300), timeout=6, markup=False)

    def on_settings_applied(self, _m: SettingsApplied) -> None:
        self.query_one(NodeHeader).set_samples(
            self.settings["local_samples"], self.settings["external_samples"]
        )

    def on_path_changed(self, m: PathChanged) -> None:
        """Which paths carry this student to its class (a typed event, not a log line's words)."""
        self.query_one(NodeHeader).set_transport(m.text)

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
            self.fatal = m
            self.query_one(NodeHeader).set_state("stopped")
            stopped = Text.assemble(("stopped", "bold red"), " · " + clean(m.title, 200))
            self.query_one(RoundProgress).set_text(stopped)

    def on_problem_cleared(self, m: ProblemCleared) -> None:
        banner = self.query_one(ProblemBanner)
        if (
            banner.problem is not None
            and not banner.problem.fatal
            and banner.problem.title == m.title
        ):
            banner.hide()
            self.notify(f"resolved: {clean(m.title, 120)}", timeout=6, markup=False)

    def on_parked(self, m: Parked) -> None:
        self.query_one(NodeHeader).set_state("paused" if m.parked else "running")

    def on_run_ended(self, m: RunEnded) -> None:
        self.running, self.outcome = False, m.outcome
        if m.outcome != "failed":
            node = self.control.node
            saved = "checkpoint saved" if node is not None and node.saved else "nothing to save"
            self.query_one(NodeHeader).set_state(m.outcome)
            self.query_one(RoundProgress).set_text(
                Text.assemble(
                    (m.outcome, "bold"),
                    f" after {self.rounds_done} rounds · {saved} · q quits",
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
        else:
            self.notify("no run under way: nothing to save (its last round is saved already)")

    def action_toggle_log(self) -> None:
        log = self.query_one("#log")
        log.display = not log.display

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_settings(self) -> None:
        fixed = {"room": self.cfg.room, "relay": self.cfg.relay, "solo": self.cfg.solo}
        self.push_screen(SettingsScreen(dict(self.settings), fixed), self._settings_chosen)

    def _settings_chosen(self, changed: dict[str, Any] | None) -> None:
        if not changed:
            return
        self.settings.update(changed)
        self.control.update(**changed)
        self.notify("settings will apply from the next round: " + ", ".join(changed))

    def action_quit_saving(self) -> None:
        """q, ctrl+q, ctrl+c: stop the round in flight within seconds, save, then exit. Pressed
        again while that happens: says so; the FORCE_AFTER-th press exits without waiting."""
        if not self.running:
            self.exit(self.outcome or "quit")
            return
        self.quit_presses += 1
        if self.quit_presses >= FORCE_AFTER:
            self._force_exit()
        elif self.quitting:
            self.notify(
                "stopping: the round in flight is abandoned and the last finished round saved. "
                "Press q again to quit without waiting (the newest saved checkpoint stays).",
                timeout=8,
            )
        else:
            self.quitting = True
            self.control.request_stop()
            self.query_one(NodeHeader).set_state("stopping, then saving")

    def _force_exit(self) -> None:
        self.forced = True
        self.control.request_stop()
        self.exit("stopped")

    def _watchdog(self) -> None:
        """A stop signal must end the process even if the terminal teardown blocks."""
        self.training_done.wait(SAVE_WAIT)
        grace = 1.0 if self.signals[0] == "SIGHUP" else TEARDOWN_WAIT  # no terminal to restore
        if not self.exited.wait(grace) and self.on_stuck is not None:
            self.forced = True
            self.on_stuck()

    # --------------------------------------------------------------------- signals
    def stop_from_signal(self, name: str) -> None:
        """SIGTERM / SIGHUP / SIGINT (from a signal handler): like q; a second one quits at once."""
        self.signals.append(name)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_stop_signal, name)

    def _on_stop_signal(self, name: str) -> None:
        if len(self.signals) == 1 and self.on_stuck is not None:
            threading.Thread(target=self._watchdog, name="stop-watchdog", daemon=True).start()
        if len(self.signals) > 1 and self.running:
            self._force_exit()
            return
        self.quit_presses = max(self.quit_presses, 1)
        if not self.running:
            self.exit(self.outcome or "quit")
            return
        self.quitting = True
        self.control.request_stop()
        self.query_one(NodeHeader).set_state(f"{name}: stopping, then saving")


def run_dashboard(cfg: Config, run: Callable[..., Any] = _run_single) -> int:
    """`sapo-edge` in a terminal: open the dashboard and train until done or quit; then, with the
    terminal restored, print the error and its fix (if any) and the run's summary. `run`: what
    trains (run_single's signature; `join` passes its own)."""
    cfg = dataclasses.replace(cfg)
    app = SapoDashboard(cfg, run=run)
    app.on_stuck = lambda: _finish(app, cfg, "")
    with stop_signals(app.stop_from_signal):
        outcome = app.run()
    app.exited.set()
    return _finish(app, cfg, outcome)


def _finish(app: SapoDashboard, cfg: Config, outcome: str) -> int:
    """Print the error with its fix and the summary; end at once if training may still run."""
    control, fatal = app.control, app.fatal
    error = (fatal.title, fatal.after or fatal.remedy) if fatal is not None else None
    outcome = "failed" if error else control.outcome or ("stopped" if app.forced else outcome)
    node, start, again = control.node, control.start_round, control.again
    text = exit_summary(cfg, node, outcome, start_round=start, error=error, again=again)
    if app.forced and not app.training_done.is_set():
        text += "\n  (quit without waiting: the round in flight was not saved)"
    code = 1 if error else exit_code(app.signals[0]) if app.signals else 0
    try:
        print(text, file=sys.stderr if error else sys.stdout, flush=True)
    except (OSError, ValueError):
        pass  # the terminal is gone (SIGHUP)
    if app.forced:  # the training thread or the terminal teardown may still be busy
        os._exit(code)
    return code


def _keep_traceback(detail: str) -> str:
    try:
        fd, path = tempfile.mkstemp(prefix="sapo-edge-error-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(detail)
    except OSError:
        return ""
    return f"{path} (attach it to a bug report)"
