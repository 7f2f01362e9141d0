"""The class view's panels: the join code (large letters and a QR code), one row per member,
every member's reward curve with the class mean (and a solo baseline), and who learned from
whom. Names are members' claims: every one reaches Textual as cleaned `rich.text.Text`."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from ...classroom.board_rows import ClassSnapshot, MemberRow
from ...textsafe import clean
from .tables import ago

BLOCKS = "▁▂▃▄▅▆▇█"
MAX_LINES = 10  # member curves drawn (the most recent members first); the mean always
SINGLE_POINTS = 3  # a curve of up to this many rounds is drawn as large points


def sparkline(values: list[float], width: int = 10, top: float = 1.0) -> str:
    """The last `width` values as block characters (0 to `top`)."""
    top = max([top, *values]) or 1.0
    return "".join(BLOCKS[min(7, int(v / top * 7.999))] for v in values[-width:])


NAME_WIDTH, MAX_NAME_WIDTH = 18, 44  # a member's name in the table, suffix included


def _name(row: MemberRow, width: int = NAME_WIDTH) -> Text:
    suffix = " (host)" if row.is_host else " (baseline)" if row.role == "baseline" else ""
    return Text(clean(row.name, width - len(suffix)) + suffix)


QUIET_AFTER = 60.0  # seconds without a word from a member before its state reads as old


def _doing(row: MemberRow, now: float) -> Text:
    """What the member says it is doing; 'quiet' once it has said nothing for a while (it
    left, or its laptop sleeps): its last word is not its present."""
    text = clean(row.state, 24)
    if text and now - row.last_seen > QUIET_AFTER:
        return Text("quiet", style="dim")
    return Text(text)


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
        """No code admits anyone now (it expired, or wrong tries retired it)."""
        self.query_one("#join-big", Static).update(Text("no valid join code", style="bold"))
        small = Text(
            "The code expired, or wrong tries retired it: press n for a new one "
            "(members already in stay in)."
        )
        if page:
            small.append(f"\nprojector page: {clean(page, 120)}")
        self.query_one("#join-small", Static).update(small)
        self.query_one("#join-qr", Static).update("")


class MembersTable(DataTable):
    COLUMNS = (
        "member",
        "doing",
        "backend",
        "model",
        "rounds",
        "reward5",
        "trend",
        "shared",
        "used",
        "Aha",
        "recv",
        "seen",
    )

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="none", zebra_stripes=True, **kw)

    def on_mount(self) -> None:
        self.border_title = (
            "members: each one's own signed figures (used: by others; recv: groups verified here)"
        )
        self.add_columns(*self.COLUMNS)

    OTHERS = 100  # the columns but the name and the model, with their padding, at their widest
    MODEL_FROM = 160  # the model column from this many columns (a class mostly runs one model)

    def show(self, snap: ClassSnapshot) -> None:
        self.clear(columns=True)  # columns fit what is shown now
        with_model = self.size.width >= self.MODEL_FROM
        self.add_columns(*(c for c in self.COLUMNS if with_model or c != "model"))
        # names in full where the terminal has room ('mellow-quokka-3f2a (host)' at 140)
        others = self.OTHERS + (16 if with_model else 0)
        width = max(NAME_WIDTH, min(MAX_NAME_WIDTH, self.size.width - others))
        for m in snap.members:
            reward = "-" if m.recent_reward is None else f"{m.recent_reward:.2f}"
            model = Text(clean(m.model.split("/")[-1].removesuffix("-Instruct"), 14))
            self.add_row(
                _name(m, width),
                _doing(m, snap.now),
                Text(clean(m.backend, 14)),
                *([model] if with_model else []),
                str(m.rounds),
                reward,
                Text(sparkline(m.rewards, 6), style="green"),
                str(m.shared),
                str(m.used_by_others),
                Text(str(m.aha), style="bold yellow" if m.aha else ""),
                "-" if m.received_here is None else str(m.received_here),
                ago(snap.now - m.last_seen),
            )
        if not snap.members:
            blank = [""] * (len(self.columns) - 2)
            self.add_row(Text("nobody yet"), Text("students: sapo-edge join CODE"), *blank)


class ClassChart(Vertical):
    """Every member's reward per round, the class mean, and the solo baseline when one runs."""

    def compose(self) -> ComposeResult:
        yield PlotextPlot(id="class-plot")

    def on_mount(self) -> None:
        self.border_title = "reward per round"
        self.show(None)

    def show(self, snap: ClassSnapshot | None) -> None:
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("round")
        if snap is not None:
            rounds = [r for pts in snap.curves.values() for r, _ in pts]
            top = max([0.25, *(v for pts in snap.curves.values() for _, v in pts)])
            plt.ylim(0, math.ceil(top * 4) / 4)  # the next quarter above the best reward
            if rounds:
                last = max(rounds)
                plt.xticks(list(range(1, last + 1, max(1, last // 8))))
                if last == 1:  # one round: points mid-chart, not on the edge
                    plt.xlim(0, 2)
            members = [m for m in snap.members if m.role != "baseline"]  # drawn as the baseline
            recent = sorted(members, key=lambda m: -m.last_seen)[:MAX_LINES]
            for m in recent:
                pts = snap.curves.get(m.node_id, [])
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    marker = "●" if len(pts) <= SINGLE_POINTS else "braille"  # a single point
                    plt.plot(list(xs), list(ys), label=clean(m.name, 16), marker=marker)
            if snap.swarm_mean:
                xs, ys = zip(*snap.swarm_mean, strict=True)
                plt.plot(list(xs), list(ys), label="class mean", marker="hd", color="white")
            if snap.baseline:
                xs, ys = zip(*snap.baseline, strict=True)
                plt.plot(list(xs), list(ys), label="solo baseline", marker="dot", color="gray")
        plot.refresh()


class LearnedMatrix(DataTable):
    """Rows: whose groups; columns: who trained on them and rewarded them (counts)."""

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="none", zebra_stripes=True, **kw)

    def on_mount(self) -> None:
        self.border_title = "who learned from whom"
        self.border_subtitle = "row's groups: trained on, rewarded"

    def show(self, snap: ClassSnapshot) -> None:
        self.clear(columns=True)
        # the board's most active members (MATRIX_MEMBERS: a class of 256 is not a 256 x 256
        # table); a baseline exchanges nothing; a member before its first round has nothing yet
        by_id = {m.node_id: m for m in snap.members}
        members = [by_id[k] for k in snap.matrix_ids if k in by_id and by_id[k].role != "baseline"]
        self.add_column(Text("from \\ to"))
        for m in members:
            self.add_column(Text(clean(m.name, 7)))
        for a in members:
            row = snap.matrix.get(a.node_id, {})
            cells = []
            for b in members:
                if a.node_id == b.node_id:
                    cells.append(Text("·", style="dim"))
                else:
                    rewarded = row.get(b.node_id, (0, 0))[1]
                    cells.append(Text(str(rewarded), style="bold" if rewarded else "dim"))
            self.add_row(Text(clean(a.name, 10)), *cells)
