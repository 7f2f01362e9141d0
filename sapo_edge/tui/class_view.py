"""The class view (`sapo-edge host` in a terminal, for the teacher's screen or a projector): the
join code, one row per member, every member's reward curve against the class mean, and who
learned from whom. The host's own training runs in a worker thread; the board is read once a
second on a worker thread too (a class of 256 must not stall the keys) and the widgets are
redrawn only when what they show changed; everything reaches the widgets as the small messages
below (the snapshot tests replay them without any network).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Footer, RichLog, Static

from ..classroom.board_rows import ClassSnapshot
from ..classroom.code import big_text
from ..classroom.removal import teacher_line
from ..data.textsafe import clean
from ..events import RunEvents
from ..rl.trainer import Node
from ..run.control import RunControl
from .screens.remove import HintScreen, RemoveScreen
from .screens.taught import TaughtScreen
from .widgets.class_widgets import ClassChart, JoinPanel, LearnedMatrix, MembersTable
from .widgets.tags_chart import TagsChart


@dataclass
class ClassUpdated(Message):
    snapshot: ClassSnapshot
    summary: str  # '4 members · 3 peers connected (3 manual); relay up ...'


@dataclass
class CodeShown(Message):
    code: str
    qr: list[str]
    page: str  # the projector page's URL ('' when off)


@dataclass
class OwnStatus(Message):
    """The host's own node: 'round 3 · generating', 'done after 10 rounds', 'not training'."""

    text: str


@dataclass
class ClassLog(Message):
    text: str


class _OwnCallback(RunEvents):
    """The host's own rounds, as OwnStatus lines (the full node dashboard is `sapo-edge run`)."""

    def __init__(self, post: Callable[[Message], Any]) -> None:
        self.post = post
        self.scored: tuple[int, float] | None = None  # (round, reward) once its answers scored

    def on_phase(self, node: Node, phase: str) -> None:
        text = f"round {node.round + 1}/{node.cfg.rounds} · {phase}"
        if self.scored is not None and self.scored[0] == node.round:
            text += f" · reward {self.scored[1]:.2f}"
        self.post(OwnStatus(text))

    def on_scored(self, node: Node, reward: float) -> None:
        self.scored = (node.round, reward)
        self.on_phase(node, "scored")

    def on_paused(self, node: Node, parked: bool) -> None:
        if parked:
            self.post(OwnStatus(f"paused before round {node.round + 1}/{node.cfg.rounds} (p)"))

    def on_round(self, r: Any) -> None:
        self.post(OwnStatus(f"round {r.round + 1} done · reward {r.reward_mean:.2f}"))

    def on_message(self, node: str, text: str) -> None:
        self.post(ClassLog(f"{node}: {text}"))


class ClassView(App[str]):
    CSS_PATH = Path(__file__).with_name("class_view.tcss")
    TITLE = "sapo-edge class"
    BINDINGS = [
        Binding("j", "toggle_join", "join code"),
        Binding("n", "new_code", "new code"),
        Binding("r", "report", "report"),
        Binding("s", "save", "save own"),
        Binding("p", "pause", "pause own training"),
        Binding("t", "taught", "what it teaches"),
        Binding("x", "remove", "remove member"),
        Binding("h", "hint", "worked example"),
        Binding("l", "toggle_log", "log"),
        Binding("q", "quit_class", "end class"),
        Binding("ctrl+q", "quit_class", "end class", show=False, priority=True),
        Binding("ctrl+c", "quit_class", "end class", show=False),
    ]

    def __init__(self, host: Any = None, *, start: bool = True) -> None:
        super().__init__()
        self.host, self.start, self.code = host, start, ""  # the join code in force (shown)
        self.control = RunControl()
        self.training = False
        self.quitting = False
        self.own = "not training" if host is None or not host.opts.train else "starting"
        self.summary = ""
        self.training_done = threading.Event()
        self.report_paths: list[Path] = []
        self._board_key: tuple = ()  # what the widgets show now (see refresh_board)
        self._reading = threading.Lock()
        self._drawn: dict[str, int] = {}  # widget -> the board version it shows
        self._code_live = True  # the shown code still admits (refresh_board checks)

    def compose(self) -> ComposeResult:
        yield Static("sapo-edge class · starting...", id="class-header")
        yield JoinPanel(id="join")
        yield MembersTable(id="members")
        with Horizontal(id="class-bottom"):
            yield ClassChart(id="class-chart")
            yield TagsChart(id="tags-chart")
            yield LearnedMatrix(id="matrix")
        yield RichLog(id="class-log", wrap=True, markup=False, max_lines=2000)
        yield Footer()

    def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.query_one("#class-log").display = False
        self.query_one("#class-log").border_title = "log"
        if self.host is None:
            return
        self.host.log_to(lambda text: self.post_message(ClassLog(text)))
        self.post_message(CodeShown(self.host.code, self.host.code_lines(), self.host.page_url()))
        self.refresh_board()
        self.set_interval(1.0, self.refresh_board)
        if self.start and self.host.opts.train:
            self.training = True
            self.train()

    # ------------------------------------------------------------------ the host
    @work(thread=True, group="board", exit_on_error=False)
    def refresh_board(self) -> None:
        """Read the board off the UI thread (one read at a time: a tick that finds one under
        way skips); post it only when something shown changed (the figures, the header, the
        host's verified counts, or the "seen" ages every 10 s)."""
        if self.host is None or self.host.board is None:
            return
        if not self._reading.acquire(blocking=False):
            return
        try:
            snap, summary = self.host.board.snapshot(), self.host.describe()
            live = bool(self.host.live_code())
        finally:
            self._reading.release()
        if live != self._code_live:  # the code expired or was retired (or a new one is up)
            self._code_live = live
            code = self.host.live_code()
            self.post_message(
                CodeShown(code, self.host.code_lines() if code else [], self.host.page_url())
            )
        key = (
            snap.version,
            summary,
            tuple(m.received_here for m in snap.members),
            int(snap.now // 10),
        )
        if key != self._board_key:
            self._board_key = key
            self.post_message(ClassUpdated(snap, summary))

    @work(thread=True, exclusive=True, name="training")
    def train(self) -> None:
        post = self.post_message
        try:
            self.host.train(_OwnCallback(post), lambda t: post(ClassLog(t)), self.control)
            post(OwnStatus("stopped" if self.control.stop_requested() else "done"))
        except Exception as e:  # noqa: BLE001 - shown; the class goes on without this laptop
            from ..run.remedies import explain

            title, remedy = explain(e, str(self.host.out_dir))
            post(OwnStatus(f"stopped: {clean(title, 80)}"))
            post(ClassLog(f"this laptop stopped training: {title}. {remedy}"))
        finally:
            self.training_done.set()
            self.call_from_thread(self._training_ended)

    def _training_ended(self) -> None:
        self.training = False
        if self.quitting:
            self.exit("ended")

    # ------------------------------------------------------------------ messages
    def on_class_updated(self, m: ClassUpdated) -> None:
        self.summary = m.summary
        self.query_one(MembersTable).show(m.snapshot)
        for widget in self.query("#class-chart, #tags-chart, #matrix"):  # drawn on change
            if self._drawn.get(widget.id or "") != m.snapshot.version or not m.snapshot.version:
                self._drawn[widget.id or ""] = m.snapshot.version
                widget.show(m.snapshot)
        self._header()

    def on_code_shown(self, m: CodeShown) -> None:
        if not m.code:  # no code admits anyone now
            self.query_one(JoinPanel).show_none(m.page)
            self.code = "none valid (n: a new one)"
            self._header()
            return
        words, _, where = m.code.partition("@")
        self.query_one(JoinPanel).show(
            m.code, big_text(words) + big_text("@" + where), m.qr, m.page
        )
        self.code = m.code
        self._header()

    def on_own_status(self, m: OwnStatus) -> None:
        self.own = m.text
        self._header()

    def on_class_log(self, m: ClassLog) -> None:
        self.query_one(RichLog).write(Text(clean(m.text, keep_newlines=True)))

    def _header(self) -> None:
        code = self.code
        members, _, network = self.summary.partition(" · ")
        self.query_one("#class-header", Static).update(
            Text.assemble(
                ("sapo-edge class", "bold"),
                f" · {clean(members, 20)} · code ",
                (clean(code, 80), "bold"),
                "\nthis laptop: ",
                (clean(self.own, 60), "bold"),
                f" · {clean(network, 100)}",
            )
        )

    # ------------------------------------------------------------------ keys
    def action_toggle_join(self) -> None:
        panel = self.query_one(JoinPanel)
        panel.display = not panel.display
        self.notify(
            "join code shown" if panel.display else "join code hidden (j shows it; still valid)"
        )

    def action_new_code(self) -> None:
        if self.host is None:
            return
        code = self.host.new_code()
        self.post_message(CodeShown(code, self.host.code_lines(), self.host.page_url()))
        self.notify(f"new join code: {code} (members already in stay in)", markup=False)

    def action_report(self) -> None:
        if self.host is not None:
            self.notify("writing the class report...")
            self.write_report()

    @work(thread=True, name="report")
    def write_report(self) -> None:
        from ..classroom.report import ReportError, write_report

        try:
            paths = write_report(self.host.out_dir, self.host.received_counts())
        except (ReportError, OSError) as e:
            self.call_from_thread(self.notify, clean(str(e), 300), severity="error", markup=False)
            return
        except Exception as e:  # noqa: BLE001 - a plotting bug must not end the class
            text = f"the report could not be written ({type(e).__name__}: {e}); the class goes on"
            self.call_from_thread(self.notify, clean(text, 300), severity="error", markup=False)
            return
        self.report_paths = paths
        names = ", ".join(p.name for p in paths)
        self.call_from_thread(
            self.notify, clean(f"report in {self.host.out_dir}: {names}", 400), markup=False
        )

    def action_save(self) -> None:
        """s: save this laptop's own run now (its checkpoint, before its next round); the
        class's record needs no saving (class.jsonl is written as figures arrive)."""
        if self.training:
            self.control.request_save()
            self.notify("this laptop's checkpoint will be saved before its next round")
        else:
            self.notify(
                "this laptop is not training: nothing to save (the class's record is written "
                "to class.jsonl as it arrives; r writes the report)"
            )

    def action_pause(self) -> None:
        if self.training:
            paused = self.control.toggle_pause()
            self.own = "pausing after this round" if paused else "running"
            self._header()
            self.notify(self.own if paused else "this laptop's training goes on")
        else:
            self.notify("this laptop is not training (nothing to pause)")

    def _selected(self) -> tuple[str, str]:
        """(node id, name) of the members table's selected row; ("", "") when none."""
        table = self.query_one(MembersTable)
        if self.host is None or self.host.board is None or not table.row_count:
            return "", ""
        node_id = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value or ""
        rows = {m.node_id: m.name for m in self.host.board.snapshot().members}
        return (node_id, rows[node_id]) if node_id in rows else ("", "")

    def action_taught(self) -> None:
        """t: what the selected member teaches (its groups this laptop trained on)."""
        node_id, name = self._selected()
        if not node_id:
            self.notify("select a member's row first (arrow keys)")
            return
        training = bool(self.host.opts.train)
        self.push_screen(TaughtScreen(name, self.host.taught.of(node_id), training))

    def action_remove(self) -> None:
        """x: remove a member from the class (the selected row's name filled in)."""
        self._teacher_word(lambda name, _holds: RemoveScreen(name), "remove")

    def action_hint(self) -> None:
        """h: give the selected member the worked example, or take it back (hint.py)."""
        self._teacher_word(HintScreen, "hint")

    def _teacher_word(self, screen, default: str) -> None:
        """The box `screen(name, holds_hint)` for the selected row; its line goes to the host."""
        if self.host is None or self.host.board is None:
            return
        node_id, name = self._selected()
        holds = bool(node_id) and self.host.hints.hinted(node_id, self.host.board.host_id)

        def done(line: str | None) -> None:
            if not line or not line.strip():
                return
            try:
                said = teacher_line(self.host, line, default=default)
            except ValueError as e:
                self.notify(clean(str(e), 300), severity="error", markup=False)
                return
            self.host.log(said)
            self.notify(clean(said, 300), markup=False)

        self.push_screen(screen(name, holds), done)

    def action_toggle_log(self) -> None:
        log = self.query_one("#class-log")
        log.display = not log.display

    def action_quit_class(self) -> None:
        """q: stop this laptop's round within seconds and save it, then end the class view (the
        report is written on the way out). A second q does not wait for the save."""
        if not self.training or self.quitting:
            self.control.request_stop()
            self.exit("ended")
            return
        self.quitting = True
        self.control.request_stop()
        self.own = "stopping, then saving; q again quits at once"
        self._header()

    def on_unmount(self) -> None:
        self.control.request_stop()
        if self.host is not None:
            self.host.log_to(None)  # the class's log lines go back to the terminal

    def stop_from_signal(self, name: str) -> None:
        """SIGTERM / SIGHUP / SIGINT (from a signal handler): end the class like q."""
        loop = getattr(self, "_loop", None)  # Textual's, once it runs (a signal may come first)
        if loop is not None:
            loop.call_soon_threadsafe(self.action_quit_class)


def run_class_view(host: Any) -> int:
    """`sapo-edge host` in a terminal: the class view until q (or a stop signal); then, with the
    terminal restored, the class report and where it is."""
    from ..classroom.report import end_of_class
    from ..run.stopping import exit_code, stop_signals

    app = ClassView(host)
    with stop_signals(app.stop_from_signal) as received:
        app.run()
    received_here = host.received_counts()
    host.log_to(None)
    host.end(print)  # the goodbye on every path; the network closes quietly before the summary
    n = len(host.board.members) if host.board is not None else 0
    print(f"the class ended: {n} member{'s' if n != 1 else ''}; run folder {host.out_dir}")
    node = app.control.node
    if node is not None:  # this laptop's own run, as a member
        saved = f"; checkpoint {node.saved[1]}" if node.saved is not None else ""
        rounds = f"{node.round} round{'s' if node.round != 1 else ''}"
        print(f"this laptop trained {rounds} (metrics {node.metrics_path}){saved}")
    end_of_class(host.out_dir, print, received_here)
    return exit_code(received[0]) if received else 0
