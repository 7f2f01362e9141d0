"""The class view's live curve of the lesson (issue 57): the share of answers inside <answer>
tags per round, as the class's means (ClassSnapshot.tags: the members without the hint, those
with it, the solo baselines; drawn only from rows the host vouches for), so the format spreading
from the hinted laptop reads at a glance where a row's last round jumps (75%, then 0%)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual_plotext import PlotextPlot

from ...classroom.board_rows import ClassSnapshot
from ...data.textsafe import clean, short_name

SINGLE_POINTS = 3  # a curve of up to this many rounds is drawn as large points
# (group, its label, its marker, its colour): the class bold, the hint in colour, the baseline grey
LINES = (
    ("class", "class", "hd", "white"),
    ("hint", "with the hint", "hd", "orange"),
    ("baseline", "solo baseline", "dot", "gray"),
)


def labels(snap: ClassSnapshot) -> dict[str, str]:
    """Each group's label; the hint's names its member when one alone has it ('ada (hint)'; the
    rows the host vouches for hold those the means are drawn from). Names are members' claims:
    cleaned and cut."""
    out = {group: label for group, label, _marker, _colour in LINES}
    hinted = [m for m in snap.members if m.hinted and m.vouched and m.role != "baseline"]
    if len(hinted) == 1:
        out["hint"] = f"{short_name(clean(hinted[0].name), 16)} (hint)"
    return out


class TagsChart(Vertical):
    """Answers in tags, % per round: hidden while no member says it (an older class)."""

    def compose(self) -> ComposeResult:
        yield PlotextPlot(id="tags-plot")

    def on_mount(self) -> None:
        self.border_title = "answers in tags, % per round"
        self._drawn: tuple | None = None
        self.display = False

    def show(self, snap: ClassSnapshot | None) -> None:
        """Draw the means; nothing when what it would draw is what it shows (plotext redraws the
        whole chart: a class's progress messages, or a new row, change nothing here)."""
        tags = snap.tags if snap is not None else {}
        names = labels(snap) if tags and snap is not None else {}
        drawn = tuple((k, names[k], tuple(v)) for k, v in tags.items())
        if drawn == self._drawn:
            return
        self._drawn = drawn
        self.display = bool(drawn)
        if not drawn:
            return
        plt = self.query_one(PlotextPlot).plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("round")
        plt.ylim(0, 100 + 8 * len(drawn))  # room above 100% for the legend (the hint's line)
        plt.yticks([0, 25, 50, 75, 100])
        last = max(r for _k, _n, pts in drawn for r, _ in pts)
        plt.xticks(list(range(1, last + 1, max(1, last // 6))))
        if last == 1:  # one round: points mid-chart, not on the edge
            plt.xlim(0, 2)
        for group, _label, marker, colour in LINES:
            pts = tags.get(group)
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            dot = "●" if len(pts) <= SINGLE_POINTS else marker
            plt.plot(list(xs), [100 * y for y in ys], label=names[group], marker=dot, color=colour)
        self.query_one(PlotextPlot).refresh()
