"""The Aha lesson's plot in a class report (issue 45): each member's share of answers inside
<answer> tags and its strict reward (right inside the tags only) per round, for a class whose
members said them; the members that see the worked example (the hint) drawn apart."""

from __future__ import annotations

from pathlib import Path

from ..data.textsafe import clean
from .board_rows import ClassSnapshot, row_marks

MAX_LINES = 40  # members drawn (a class of 256: the plot stays readable, class.csv has them all)


def plot_tags(snap: ClassSnapshot, run_dir: Path) -> Path | None:
    """answers_in_tags.png in `run_dir`, or None when no member said its tags and strict
    reward (a class of an older version, or before its first round)."""
    members = [m for m in snap.members if m.tags_curve and m.vouched][:MAX_LINES]
    if not members:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    with matplotlib.rc_context({"text.parse_math": False, "figure.dpi": 100}):
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
        for m in members:
            rounds, tagged, strict = zip(*m.tags_curve, strict=True)
            style = "--" if m.role == "baseline" else "-"
            width = 2.5 if m.hinted else 1.3
            label = clean(m.name, 24) + row_marks(m)
            marker = {"marker": "o", "markersize": 4} if len(rounds) <= 30 else {}
            top.plot(rounds, tagged, style, linewidth=width, label=label, **marker)
            bottom.plot(rounds, strict, style, linewidth=width, label=label, **marker)
            if m.first_tagged:  # where it first answered right inside the tags
                at = rounds.index(m.first_tagged) if m.first_tagged in rounds else None
                if at is not None:
                    bottom.plot([m.first_tagged], [strict[at]], "*", markersize=12, color="gold")
        top.set_ylabel("share of answers in tags")
        bottom.set_ylabel("strict reward (right, in tags)")
        bottom.set_xlabel("round")
        top.set_title(
            "The answer format spreading: who answers inside <answer> tags (★: first right)"
        )
        for ax in (top, bottom):
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        top.legend(loc="best", fontsize=8, ncol=2)
        fig.tight_layout()
        path = run_dir / "answers_in_tags.png"
        fig.savefig(path)
        plt.close(fig)
    return path
