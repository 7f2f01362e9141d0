"""End of class: `sapo-edge report RUN_DIR` (or the class view's r key) writes the class table as
class.csv and class.json, and two plots, reward_curves.png and learned_from.png, into the run
folder `sapo-edge host` wrote. Plots use matplotlib (already installed with reasoning-gym's
dependencies, and declared): members' names are drawn as plain text, never as math markup.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..data.textsafe import clean
from .board import CLASS_FILE, ClassBoard
from .board_rows import ClassSnapshot, row_marks
from .host import INFO_FILE
from .report_tags import plot_tags
from .taught import TAUGHT_FILE, most_trained

CSV_COLUMNS = [
    "name",
    "node_id",
    "role",
    "host",
    "backend",
    "model",
    "rounds",
    "reward_first5",
    "reward_last5",
    "shared",
    "used_by_others",
    "rewarded_by_others",
    "aha",
    "received_by_host",
    "in_tags_last",
    "strict_last",
    "first_right_in_tags",
    "taught_by",
    "most_trained_answer",
]


# The board holds up to 256 members (identities are free in the room): past this many the
# plots stay this size and drop names and numbers (class.csv and class.json have them all).
MAX_LABELLED = 40
MARKED_POINTS = 30  # curves of up to this many rounds get a marker on every point
MAX_FIGURE_INCHES = 16.0


class ReportError(ValueError):
    """No class to report on in that folder; the message says which folder to pass."""


def _cell(value: Any) -> Any:
    """A spreadsheet cell that cannot become a formula (a name such as '=HYPERLINK(...)')."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def class_file(run_dir: Path) -> Path:
    """The class's record in `run_dir`, or ReportError saying which folder to pass."""
    path = run_dir / CLASS_FILE
    if not path.is_file():
        raise ReportError(
            f"{run_dir} holds no {CLASS_FILE}: pass the folder `sapo-edge host` printed when the "
            "class started (`sapo-edge runs` lists run folders)."
        )
    return path


def load_class(
    run_dir: Path, received: dict[str, int] | None = None
) -> tuple[ClassSnapshot, dict[str, Any]]:
    path = class_file(run_dir)
    try:
        info = json.loads((run_dir / INFO_FILE).read_text(encoding="utf-8"))
        if not isinstance(info, dict):
            info = {}
    except (OSError, ValueError):
        info = {}
    host_id = info.get("host_id", "") if isinstance(info.get("host_id"), str) else ""
    board = ClassBoard.load(path, host_id=host_id, received=received)
    return board.snapshot(matrix_members=None, removed=True), info


VERIFIED_FILE = "host_verified.json"  # the groups the host verified per member, at its report
MAX_VERIFIED_BYTES = 1 << 20


def verified_counts(run_dir: Path, received: dict[str, int] | None) -> dict[str, int] | None:
    """The host's verified counts: kept in the run folder when the host passes them (its r and
    q), read back from there when not (`sapo-edge report RUN_DIR` later), so a report made again
    keeps them; None when the host never wrote them."""
    path = run_dir / VERIFIED_FILE
    if received is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"received_by_host": received}, indent=1) + "\n", "utf-8")
        tmp.replace(path)
        return received
    try:
        if path.stat().st_size > MAX_VERIFIED_BYTES:
            return None
        saved = json.loads(path.read_text(encoding="utf-8"))["received_by_host"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(saved, dict) or not all(
        isinstance(k, str) and len(k) == 32 and type(v) is int and 0 <= v < 2**31
        for k, v in saved.items()
    ):
        return None  # not what the host wrote: no counts rather than wrong ones
    return saved


def write_report(run_dir: Path, received: dict[str, int] | None = None) -> list[Path]:
    """Write class.csv, class.json, reward_curves.png and learned_from.png; returns the paths.
    `received`: the groups the host verified per member (the host passes them and they are kept
    in the folder; a report made later from the folder reads them back)."""
    run_dir = Path(run_dir)
    class_file(run_dir)  # before anything is written into the folder
    received = verified_counts(run_dir, received)
    snap, info = load_class(run_dir, received)
    trained = most_trained(run_dir / TAUGHT_FILE)  # the host's training: what each one taught
    rows = []
    for m in snap.members:
        rows.append(
            {
                "name": clean(m.name, 60),
                "node_id": m.node_id,
                "role": m.role,
                "host": m.is_host,
                "backend": clean(m.backend, 60),
                "model": clean(m.model, 120),
                "rounds": m.rounds,
                "reward_first5": _mean(m.rewards[:5]),
                "reward_last5": _mean(m.rewards[-5:]),
                "shared": m.shared,
                "used_by_others": m.used_by_others,
                "rewarded_by_others": m.rewarded_by_others,
                "aha": m.aha,
                "received_by_host": m.received_here,
                "in_tags_last": m.tagged,
                "strict_last": m.strict,
                "first_right_in_tags": m.first_tagged or None,
                "taught_by": m.taught_by or None,
                "most_trained_answer": clean(trained[m.node_id][0][0], 120)
                if trained.get(m.node_id)
                else None,
                "most_trained_answers": trained.get(m.node_id, []),
            }
        )
    csv_path = run_dir / "class.csv"
    with open(csv_path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, CSV_COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({k: _cell(v) for k, v in row.items() if k in CSV_COLUMNS})
    json_path = run_dir / "class.json"
    data = snap.to_json()
    json_path.write_text(
        json.dumps(
            {
                "task": clean(info.get("task", ""), 300),
                "settings": info.get("settings", {}),
                "members": rows,
                "curves": data["curves"],
                "class_mean": data["swarm_mean"],
                "first_right_in_tags": data["first_tagged"],
                "solo_baseline": data["baseline"],
                "learned_from": data["matrix"],
                "note": "figures are each member's own signed claims; received_by_host is what "
                "the host verified itself",
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    curves, matrix = _plots(snap, run_dir, clean(info.get("task", ""), 120))
    tags = plot_tags(snap, run_dir)
    return [csv_path, json_path, curves, matrix, *([tags] if tags else [])]


def end_of_class(
    out_dir: Path, say: Callable[[str], None], received: dict[str, int] | None = None
) -> list[Path]:
    """The report as a class ends: written, or a sentence saying why not (never a traceback)."""
    try:
        paths = write_report(out_dir, received)
    except ReportError:
        say(f"sapo-edge: no member reported a round: no class report ({out_dir}).")
        return []
    except OSError as e:
        say(
            f"sapo-edge: the class report could not be written ({e}); later: sapo-edge report {out_dir}"
        )
        return []
    say("class report: " + ", ".join(str(p) for p in paths))
    return paths


def _plots(snap: ClassSnapshot, run_dir: Path, task: str) -> tuple[Path, Path]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    def few(xs: Any, size: float, hollow: bool = False) -> dict[str, Any]:
        """A marker on every point while a curve has few (one round is a point, not nothing);
        the means' markers are hollow, so the members' points show through them."""
        if len(xs) > MARKED_POINTS:
            return {}
        ring = {"markerfacecolor": "none", "markeredgewidth": 2} if hollow else {}
        return {"marker": "D" if hollow else "o", "markersize": size, **ring}

    names = {m.node_id: clean(m.name, 24) + row_marks(m) for m in snap.members}
    taught = {m.node_id: m.taught_by for m in snap.members}

    def first(producer: str, learner: str) -> bool:
        return bool(producer) and taught.get(learner) == producer

    with matplotlib.rc_context({"text.parse_math": False, "figure.dpi": 100}):
        fig, ax = plt.subplots(figsize=(9, 5))
        for m in snap.members:
            pts = snap.curves.get(m.node_id, [])
            if pts:
                xs, ys = zip(*pts, strict=True)
                style = "--" if m.role == "baseline" else "-"
                ax.plot(
                    xs, ys, style, linewidth=1.2, alpha=0.8, label=names[m.node_id], **few(xs, 5)
                )
        if snap.swarm_mean:
            xs, ys = zip(*snap.swarm_mean, strict=True)
            label = "class mean (rounds most members reached)"
            ax.plot(xs, ys, color="black", linewidth=3, label=label, **few(xs, 8, True))
        if snap.baseline:
            xs, ys = zip(*snap.baseline, strict=True)
            ax.plot(
                xs,
                ys,
                color="gray",
                linewidth=3,
                linestyle="--",
                label="solo baseline",
                **few(xs, 8, True),
            )
        last = max((r for pts in snap.curves.values() for r, _ in pts), default=1)
        ax.set_xlim(0.5, max(last, 2) + 0.5)  # one round is a point mid-axis, not 0.96-1.04
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("round")
        ax.set_ylabel("mean reward (each member's own verifier)")
        ax.set_title(f"Reward per round · {task}" if task else "Reward per round")
        top = max((v for pts in snap.curves.values() for _, v in pts), default=0.0)
        ax.set_ylim(0, max(top, 0.25) * 1.15)  # room above the best point
        ax.grid(alpha=0.3)
        if 0 < len(snap.members) <= MAX_LABELLED:
            ax.legend(loc="best", fontsize=8, ncol=2)
        fig.tight_layout()
        curves = run_dir / "reward_curves.png"
        fig.savefig(curves)
        plt.close(fig)

        ids = [m.node_id for m in snap.members if m.role != "baseline"]  # it exchanges nothing
        grid = [
            [0 if a == b else snap.matrix.get(a, {}).get(b, (0, 0))[1] for b in ids] for a in ids
        ]
        size = min(MAX_FIGURE_INCHES, max(4.0, 1.0 + 0.6 * len(ids)))
        fig, ax = plt.subplots(figsize=(size + 1.5, size))
        top = max((max(row) for row in grid), default=0)
        image = ax.imshow(grid or [[0]], cmap="Blues", vmin=0, vmax=max(top, 1))
        if len(ids) <= MAX_LABELLED:
            labels = [names[i] for i in ids]
            ax.set_xticks(range(len(ids)), labels, rotation=45, ha="right")
            ax.set_yticks(range(len(ids)), labels)
        for i, row in enumerate(grid if len(ids) <= MAX_LABELLED else []):
            for j, value in enumerate(row):
                ax.text(
                    j,
                    i,
                    "·" if i == j else f"{value}*" if first(ids[i], ids[j]) else str(value),
                    ha="center",
                    va="center",
                    color="white" if value > max(max(map(max, grid or [[0]])), 1) / 2 else "black",
                )
        ax.set_xlabel("trained on them and rewarded (learner)")
        ax.set_ylabel("groups from (producer)")
        ax.set_title("Who learned from whom (*: first right answer in tags came after)")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        fig.tight_layout()
        matrix = run_dir / "learned_from.png"
        fig.savefig(matrix)
        plt.close(fig)
    return curves, matrix
