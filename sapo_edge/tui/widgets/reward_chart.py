"""Mean reward per round with a moving average and the swarm's claimed average (plotext);
a one-line sparkline replaces the chart in a narrow terminal."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static
from textual_plotext import PlotextPlot

NARROW = 70  # below this many columns the chart becomes a sparkline
WINDOW = 5  # moving-average window, rounds
SINGLE_POINTS = 3  # up to this many rounds, each is drawn as a large point


def moving_average(values: list[float], window: int = WINDOW) -> list[float]:
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


class RewardChart(Vertical):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.rounds: list[int] = []
        self.rewards: list[float] = []
        self.swarm: list[tuple[int, float]] = []

    def compose(self) -> ComposeResult:
        yield PlotextPlot(id="plot")
        yield Static("", id="spark-label")
        yield Sparkline([], id="spark")

    def on_mount(self) -> None:
        self.border_title = "reward per round"
        self._layout()
        self._draw()

    def on_resize(self) -> None:
        self._layout()

    def _layout(self) -> None:
        narrow = self.size.width and self.size.width < NARROW
        self.query_one("#plot").display = not narrow
        self.query_one("#spark").display = bool(narrow)
        self.query_one("#spark-label").display = bool(narrow)

    def load(self, history: list[tuple[int, float]]) -> None:
        """A resumed run's earlier rounds (0-based round, mean reward), before any new one."""
        if not self.rounds:
            self.rounds = [r + 1 for r, _ in history]
            self.rewards = [v for _, v in history]
            self._draw()

    def add(self, round_: int, reward: float, swarm: float | None) -> None:
        """A round's reward: once scored, then again once done (the point is replaced)."""
        if self.rounds and self.rounds[-1] == round_ + 1:
            self.rounds.pop()
            self.rewards.pop()
        self.rounds.append(round_ + 1)  # rounds show 1-based
        self.rewards.append(reward)
        if swarm is not None:
            self.swarm.append((round_ + 1, swarm))
        self._draw()

    def _draw(self) -> None:
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("round")
        plt.ylim(0, 1)
        if self.rewards:
            step = max(1, len(self.rounds) // 8)
            plt.xticks(self.rounds[::step])
            if len(self.rounds) == 1:  # one round: a visible point mid-chart, not an edge dot
                plt.xlim(self.rounds[0] - 1, self.rounds[0] + 1)
            if len(self.rounds) > SINGLE_POINTS:  # the average of a few points is those points
                plt.plot(
                    self.rounds,
                    moving_average(self.rewards),
                    label=f"avg {WINDOW}",
                    marker="braille",
                )
            marker = "●" if len(self.rounds) <= SINGLE_POINTS else "dot"
            plt.plot(self.rounds, self.rewards, label="this node", marker=marker)
        if self.swarm:
            xs, ys = zip(*self.swarm, strict=True)
            plt.plot(list(xs), list(ys), label="peers (claimed)", marker="x")
        plot.refresh()
        spark = self.query_one(Sparkline)
        spark.data = list(self.rewards) or [0.0]
        last = f"{self.rewards[-1]:.2f}" if self.rewards else "-"
        avg = f"{moving_average(self.rewards)[-1]:.2f}" if self.rewards else "-"
        self.query_one("#spark-label", Static).update(f"reward {last} · avg{WINDOW} {avg}")
