"""The class view's panels: the join code (large letters and a QR code), one row per member,
every member's reward curve with the class mean (and a solo baseline), and who learned from
whom. Names are members' claims: every one reaches Textual as cleaned `rich.text.Text`."""

from __future__ import annotations

import math
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, ScrollableContainer, Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from ...classroom.board_rows import (
    ClassSnapshot,
    MemberRow,
    first_tagged_lines,
    row_marks,
)
from ...data.textsafe import clean, short_name
from .keyed_table import KeyedTable
from .tables import ago

BLOCKS = "▁▂▃▄▅▆▇█"
MAX_LINES = 10  # member curves drawn (the furthest along first); the mean always
SINGLE_POINTS = 3  # a curve of up to this many rounds is drawn as large points


def sparkline(values: list[float], width: int = 10, top: float = 1.0) -> str:
    """The last `width` values as block characters (0 to `top`)."""
    top = max([top, *values]) or 1.0
    return "".join(BLOCKS[min(7, int(v / top * 7.999))] for v in values[-width:])


NAME_WIDTH, MAX_NAME_WIDTH = 18, 44  # a member's name in the table, suffix included


def _name(row: MemberRow, width: int = NAME_WIDTH) -> Text:
    suffix = row_marks(row)
    return Text(short_name(clean(row.name), width - len(suffix)) + suffix)


QUIET_AFTER = 60.0  # seconds without a word from a member before its state reads as old


def _doing(row: MemberRow, now: float) -> Text:
    """What the member says it is doing. Its last word stands when it is the end of its run
    (left, done); else, once it has said nothing for QUIET_AFTER (a laptop asleep, a network
    gone), it is not its present: 'asleep? not heard for 2m'."""
    if row.state and not row.final and _quiet(row, now):
        return Text(f"asleep? not heard for {ago(now - row.last_seen).removesuffix(' ago')}")
    return Text(clean(row.state, 24), style="dim" if row.final else "")


def _quiet(row: MemberRow, now: float) -> bool:
    return now - row.last_seen > QUIET_AFTER


class JoinPanel(Horizontal):
    """The code in large letters (words, then the address) beside its QR code."""

    def compose(self) -> ComposeResult:
        with Vertical(id="join-text"):
            yield Static("", id="join-big")
            yield Static("", id="join-small")
        yield Static("", id="join-qr")

    def on_mount(self) -> None:
        self.border_title = "join the class"

    def show(self, code: str, big: list[str], qr: list[str], page: str) -> None:
        self.query_one("#join-big", Static).update(Text("\n".join(big), style="bold"))
        small = Text.assemble(
            "students run:  ",
            ("sapo-edge join " + clean(code, 120), "bold"),
            "\n(n: a new code · j: hide this panel)",
        )
        if page:
            small.append(f"\nprojector page: {clean(page, 120)}")
        self.query_one("#join-small", Static).update(small)
        self.query_one("#join-qr", Static).update(Text("\n".join(qr), style="black on white"))

    def show_none(self, page: str) -> None:
        """No code admits anyone now (it expired, wrong tries retired it, or it is used up)."""
        self.query_one("#join-big", Static).update(Text("no valid join code", style="bold"))
        small = Text(
            "The code expired, wrong tries retired it, or it admitted the class's size: press "
            "n for a new one (members already in stay in)."
        )
        if page:
            small.append(f"\nprojector page: {clean(page, 120)}")
        self.query_one("#join-small", Static).update(small)
        self.query_one("#join-qr", Static).update("")


class MembersTable(KeyedTable):
    COLUMNS = (
        "member",
        "doing",
        "backend",
        "model",
        "rounds",
        "reward5",
        "trend",
        "tags",
        "strict",
        "shared",
        "used",
        "Aha",
        "recv",
        "seen",
    )

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self._made: dict[str, tuple[tuple, tuple, list[Any]]] = {}  # id -> (what, when, cells)
        self._layout: tuple | None = None  # (model, backend, width) the columns were cut for

    def on_mount(self) -> None:
        self.border_title = (
            "members: each one's own signed figures (used: by others; recv: groups verified here)"
        )

    OTHERS = 116  # the columns but the name and the model, with their padding, at their widest
    MODEL_FROM = 160  # the model column from this many columns (a class mostly runs one model)
    BACKEND_FROM = 150  # the backend column from this many (the page always shows both)

    def show(self, snap: ClassSnapshot) -> None:
        """Only what changed is redrawn (KeyedTable): a class of 256 sends a progress each."""
        with_model = self.size.width >= self.MODEL_FROM
        with_backend = self.size.width >= self.BACKEND_FROM
        # names in full where the terminal has room ('mellow-quokka-3f2a (host)' at 140)
        others = self.OTHERS + (16 if with_model else 0) - (0 if with_backend else 16)
        width = max(NAME_WIDTH, min(MAX_NAME_WIDTH, self.size.width - others))
        dropped = {"model"} - ({"model"} if with_model else set())
        dropped |= set() if with_backend else {"backend"}
        columns = {c: c for c in self.COLUMNS if c not in dropped}
        rows, made = {}, {}
        for m in snap.members:  # a row's cells are made again only when what they show moved
            what, when = (
                (m, width, with_model, with_backend),
                (ago(snap.now - m.last_seen), _quiet(m, snap.now)),
            )
            had = self._made.get(m.node_id)
            if had is None or had[0] != what:
                cells = _member_cells(m, snap.now, width, with_model, with_backend)
            elif had[1] != when:  # only time went by: "doing" (quiet?) and "seen"
                cells = list(had[2])
                cells[1], cells[-1] = _doing(m, snap.now), Text(when[0])
            else:
                cells = had[2]
            rows[m.node_id], made[m.node_id] = cells, (what, when, cells)
        self._made = made
        if not rows:
            blank = [""] * (len(columns) - 2)
            rows = {"": [Text("nobody yet"), Text("students: sapo-edge join CODE"), *blank]}
        if (with_model, with_backend, width) != self._layout:  # cut anew
            self._layout = (with_model, with_backend, width)
            self._columns = {}
        self.show_rows(columns, rows, self.LEAST)

    # the widest these columns' cells can be (what members are doing changes every second)
    LEAST = {"doing": 24, "seen": 7}


def _member_cells(
    m: MemberRow, now: float, width: int, with_model: bool, with_backend: bool = True
) -> list[Any]:
    """One member's row: its name (cut to `width`), what it is doing, its figures (all Text:
    a DataTable parses a str cell as markup)."""
    reward = "-" if m.recent_reward is None else f"{m.recent_reward:.2f}"
    model = Text(clean(m.model.split("/")[-1].removesuffix("-Instruct"), 14))
    return [
        _name(m, width),
        _doing(m, now),
        *([Text(clean(m.backend, 14))] if with_backend else []),
        *([model] if with_model else []),
        Text(str(m.rounds)),
        Text(reward),
        Text(sparkline(m.rewards, 6), style="green"),
        Text("-" if m.tagged is None else f"{m.tagged:.0%}"),
        Text("-" if m.strict is None else f"{m.strict:.2f}", style="bold" if m.strict else ""),
        Text(str(m.shared)),
        Text(str(m.used_by_others)),
        Text(str(m.aha), style="bold yellow" if m.aha else ""),
        Text("-" if m.received_here is None else str(m.received_here)),
        Text(ago(now - m.last_seen)),
    ]


class ClassChart(Vertical):
    """Every member's reward per round, the class mean, and the solo baseline when one runs."""

    _drawn: tuple | None = None  # what the chart shows now (drawn again only when it changes)

    def compose(self) -> ComposeResult:
        yield PlotextPlot(id="class-plot")

    def on_mount(self) -> None:
        self.border_title = "reward per round"
        self.show(None)

    def show(self, snap: ClassSnapshot | None) -> None:
        """Draw the curves; nothing when what it would draw is what it shows (plotext redraws
        the whole chart: a class's progress messages change nothing here)."""
        lines: list[tuple[str, tuple]] = []
        top, last = 0.25, 0
        if snap is not None:
            rounds = [r for pts in snap.curves.values() for r, _ in pts]
            top = max([0.25, *(v for pts in snap.curves.values() for _, v in pts)])
            last = max(rounds, default=0)
            members = [m for m in snap.members if m.role != "baseline"]  # drawn as the baseline
            # the furthest along (a progress message moves no curve: it draws nothing new)
            recent = sorted(members, key=lambda m: -m.last_round)[:MAX_LINES]
            lines = [
                (short_name(clean(m.name), 16), tuple(snap.curves[m.node_id]))
                for m in recent
                if snap.curves.get(m.node_id)
            ]
        drawn = (
            snap is None,
            top,
            last,
            lines,
            tuple(snap.swarm_mean) if snap else (),
            tuple(snap.baseline) if snap else (),
        )
        if drawn == self._drawn:
            return
        self._drawn = drawn
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("round")
        if snap is not None:
            plt.ylim(0, math.ceil(top * 4) / 4)  # the next quarter above the best reward
            if last:
                plt.xticks(list(range(1, last + 1, max(1, last // 8))))
                if last == 1:  # one round: points mid-chart, not on the edge
                    plt.xlim(0, 2)
            for name, pts in lines:
                xs, ys = zip(*pts, strict=True)
                marker = "●" if len(pts) <= SINGLE_POINTS else "braille"  # a single point
                plt.plot(list(xs), list(ys), label=name, marker=marker)
            if snap.swarm_mean:
                xs, ys = zip(*snap.swarm_mean, strict=True)
                plt.plot(list(xs), list(ys), label="class mean", marker="hd", color="white")
            if snap.baseline:
                xs, ys = zip(*snap.baseline, strict=True)
                plt.plot(list(xs), list(ys), label="solo baseline", marker="dot", color="gray")
        plot.refresh()


class LearnedMatrix(ScrollableContainer):
    """Rows: whose groups; columns: who trained on them and rewarded them (counts). One Text
    (a table of 16 x 16 cells as a DataTable cost more of the UI thread than the whole rest of
    a redraw), redrawn only when it changed; it scrolls where the panel is narrower."""

    DEFAULT_CSS = "LearnedMatrix > Static { width: auto; height: auto; }"

    def compose(self) -> ComposeResult:
        yield Static()

    def on_mount(self) -> None:
        self.border_title = "who learned from whom"
        self.border_subtitle = (
            "row's groups the column rewarded · *: its first right answer in tags came after"
        )
        self.row_count = 0
        self._shown: Text | None = None

    def show(self, snap: ClassSnapshot) -> None:
        # the board's most active members (MATRIX_MEMBERS: a class of 256 is not a 256 x 256
        # table); a baseline exchanges nothing; a member before its first round has nothing yet
        by_id = {m.node_id: m for m in snap.members}
        members = [by_id[k] for k in snap.matrix_ids if k in by_id and by_id[k].role != "baseline"]
        out = Text(no_wrap=True, overflow="crop")
        out.append(" " + _cells("from \\ to", 10), style="bold")
        for m in members:
            out.append(" " + _cells(short_name(clean(m.name), 7), 7, right=True), style="bold")
        for a in members:
            row = snap.matrix.get(a.node_id, {})
            out.append("\n " + _cells(short_name(clean(a.name), 10), 10))
            for b in members:
                if a.node_id == b.node_id:
                    out.append(" " + _cells("·", 7, right=True), style="dim")
                else:
                    rewarded = row.get(b.node_id, (0, 0))[1]
                    first = b.taught_by == a.node_id  # b's first tagged right answer followed
                    text = f"{rewarded}*" if first else str(rewarded)
                    style = "bold yellow" if first else "bold" if rewarded else "dim"
                    out.append(" " + _cells(text, 7, right=True), style=style)
        for line in first_tagged_lines(snap.members, lambda name: short_name(clean(name), 12)):
            out.append("\n " + line)
        self.row_count = len(members)
        if self._shown is None or out.plain != self._shown.plain or out.spans != self._shown.spans:
            self._shown = out
            self.query_one(Static).update(out)


def _cells(text: str, width: int, right: bool = False) -> str:
    """`text` in exactly `width` terminal cells (a wide character counts two)."""
    if right:
        return " " * max(0, width - cell_len(text)) + set_cell_size(
            text, min(width, cell_len(text))
        )
    return set_cell_size(text, width)
