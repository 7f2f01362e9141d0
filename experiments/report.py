"""The sweep's table and plots, from its output folder (runs/sweep by default).

    .venv/bin/python experiments/sweep.py --stages report    # or: python experiments/report.py

Writes, under docs/sweep/: summary.md (the cumulative-reward table in the paper's Table 1
shape, with the held-out pass@1 before and after), summary.json (the same numbers), and
reward_per_round.png / cumulative_reward.png (matplotlib).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sapo_edge.rl.metrics import read_rewards  # noqa: E402

WINDOW = 3  # moving average over rounds in the plot


SPLITS = ("8/0", "6/2", "4/4", "2/6")  # I local / J external of 8 groups, the paper's Table 1


def split_dir(out: Path, split: str) -> Path:
    """Where the sweep keeps one split's nodes."""
    return out / split.replace("/", "-")


def _json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def collect(out: Path, splits: list[str]) -> dict:
    base = _json(out / "eval-base.json")
    result = {
        "base_pass_at_1": base["pass_at_1"] if base else None,
        "wall_seconds": _json(out / "wall_seconds.json"),
        "splits": {},
    }
    for split in splits:
        d = split_dir(out, split)
        nodes = sorted(p.parent.name for p in d.glob("*/metrics.jsonl"))
        per_node = {n: read_rewards(d / n / "metrics.jsonl") for n in nodes}
        evals = {n: _json(d / f"eval-{n}.json") for n in nodes}
        after = [e["pass_at_1"] for e in evals.values() if e]
        result["splits"][split] = {
            "rewards": per_node,
            "cumulative": {n: sum(r) for n, r in per_node.items()},
            "total": sum(sum(r) for r in per_node.values()),
            "rounds": min((len(r) for r in per_node.values()), default=0),
            "heldout_after": {n: e["pass_at_1"] for n, e in evals.items() if e},
            "heldout_after_mean": statistics.fmean(after) if after else None,
            "sim_seconds": _json(d / "sim_seconds.json"),
        }
    return result


def mean_curve(rewards: dict[str, list[float]]) -> list[float]:
    rounds = min((len(r) for r in rewards.values()), default=0)
    return [statistics.fmean(r[i] for r in rewards.values()) for i in range(rounds)]


def moving_average(xs: list[float], window: int) -> list[float]:
    return [statistics.fmean(xs[max(0, i - window + 1) : i + 1]) for i in range(len(xs))]


def table(data: dict) -> str:
    splits = data["splits"]
    nodes = sorted({n for s in splits.values() for n in s["cumulative"]})
    head = "| local / external | " + " | ".join(nodes) + " | total | vs 8/0 | held-out after |"
    lines = [head, "|---" * (len(nodes) + 4) + "|"]
    ref = splits.get("8/0", {}).get("total")
    for split, s in splits.items():
        cells = [f"{s['cumulative'].get(n, float('nan')):.2f}" for n in nodes]
        rel = f"{100 * (s['total'] / ref - 1):+.0f}%" if ref else "-"
        after = s["heldout_after_mean"]
        after_cell = "-" if after is None else f"{after:.3f}"
        lines.append(
            f"| {split} | {' | '.join(cells)} | **{s['total']:.2f}** | {rel} | {after_cell} |"
        )
    base = data["base_pass_at_1"]
    lines.append("")
    lines.append(
        f"Held-out pass@1 before training (base model): {base:.3f}."
        if base is not None
        else "Held-out pass@1 of the base model: not measured."
    )
    return "\n".join(lines)


def cumulative(curve: list[float], nodes: int) -> list[float]:
    out, total = [], 0.0
    for x in curve:
        total += x * nodes
        out.append(total)
    return out


def plots(data: dict, docs: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = [
        (
            "reward_per_round.png",
            f"mean reward over nodes ({WINDOW}-round moving average)",
            "Reward per round by local/external split",
            lambda s: moving_average(mean_curve(s["rewards"]), WINDOW),
        ),
        (
            "cumulative_reward.png",
            "cumulative reward (sum over nodes)",
            "Cumulative reward by local/external split",
            lambda s: cumulative(mean_curve(s["rewards"]), len(s["rewards"])),
        ),
    ]
    paths = []
    for name, ylabel, title, curve_of in figures:
        fig, ax = plt.subplots(figsize=(7, 4))
        for split, s in data["splits"].items():
            ys = curve_of(s)
            ax.plot(range(1, len(ys) + 1), ys, label=split, marker="o", ms=3)
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(title="I local / J external")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(docs / name)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def write_report(out: Path, splits: list[str], config: Path, docs: Path) -> None:
    data = collect(out, splits)
    if not any(s["rounds"] for s in data["splits"].values()):
        raise SystemExit(f"no sweep results under {out}: run experiments/sweep.py first")
    target = docs / "sweep"
    target.mkdir(parents=True, exist_ok=True)
    (target / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
    wall = data["wall_seconds"]
    text = (
        f"Config: `{config.name}`; cumulative reward = sum over rounds of each node's mean "
        f"reward (as in the paper's Table 1), {max(s['rounds'] for s in data['splits'].values())} "
        "rounds.\n\n"
        + table(data)
        + (f"\n\nSweep wall time (runs and evaluations): {wall / 60:.1f} min.\n" if wall else "\n")
    )
    (target / "summary.md").write_text(text)
    for p in plots(data, target):
        print(f"wrote {p}")
    print(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/sweep"))
    ap.add_argument("--splits", default=",".join(SPLITS))
    ap.add_argument("--config", type=Path, default=HERE / "sweep.toml")
    ap.add_argument("--docs", type=Path, default=Path("docs"))
    a = ap.parse_args()
    write_report(a.out, a.splits.split(","), a.config, a.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
