"""The Aha report (issue 45): does one node's skill, the answer format, reach the nodes that lack it?

Called by experiments/evidence_report.py for an experiment whose cells have hinted nodes
(experiments/aha.toml: node 0 sees the worked example, the others never do, scoring is strict,
held-out pass@1 asks every adapter without the example). It gives the line beginning
`Aha spread:` (the unhinted nodes' held-out strict pass@1 under 8/0, then under each sharing
split, mean [95% interval over seeds], then the hinted node's), whether the issue's goal is met,
the mechanism per seed (groups of the hinted node each unhinted node trained on, the round each
first tagged a right answer itself) and the plot of tagged answers and strict reward per round.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from stats import Interval, interval

SOLO = "8/0"
GOAL_RATIO, GOAL_GAIN = 2.0, 0.15  # at least 2x 8/0's unhinted held-out pass@1, and 0.15 more


def is_aha(cells: list[dict]) -> bool:
    return any(c.get("config", {}).get("hinted_nodes") for c in cells)


def roles(cell: dict) -> tuple[list[str], list[str]]:
    """(hinted, unhinted) node names of a cell, in node order."""
    names = list(cell["heldout"]["per_node"])
    hinted = set(cell["config"].get("hinted_nodes") or [])
    return [n for k, n in enumerate(names) if k in hinted], [
        n for k, n in enumerate(names) if k not in hinted
    ]


def pooled(cell: dict, names: list[str]) -> float:
    """Held-out strict pass@1 over every completion of these nodes."""
    scores = [s for n in names for s in cell["heldout"]["per_node"][n]["scores"]]
    return sum(scores) / len(scores)


def first_tagged_right(cell: dict, name: str) -> int | None:
    """The first round in which this node's own completions held a tagged right answer."""
    return next((r for r, x in enumerate(cell["strict_reward"][name]) if x and x > 0), None)


def from_hinted(cell: dict, name: str) -> int:
    """Groups of the hinted nodes this node trained on, over the whole run."""
    hinted, _ = roles(cell)
    ids = {cell["node_ids"][h] for h in hinted}
    return sum(n for rnd in cell["external_from"][name] for p, n in rnd.items() if p in ids)


def analyse(cells: list[dict]) -> dict:
    by_split: dict[str, dict[int, dict]] = {}
    for c in cells:
        if c["split"] != "base" and "strict_reward" in c:
            by_split.setdefault(c["split"], {})[c["seed"]] = c
    splits = {}
    for split, seeds in by_split.items():
        unhinted = {s: pooled(c, roles(c)[1]) for s, c in seeds.items()}
        hinted = {s: pooled(c, roles(c)[0]) for s, c in seeds.items()}
        splits[split] = {
            "seeds": sorted(seeds),
            "unhinted": unhinted,
            "hinted": hinted,
            "unhinted_interval": interval(list(unhinted.values())),
            "hinted_interval": interval(list(hinted.values())),
            "mechanism": {
                s: {
                    n: (from_hinted(c, n), first_tagged_right(c, n), c["tagged_share"][n][-1])
                    for n in roles(c)[1]
                }
                for s, c in sorted(seeds.items())
            },
        }
    base = next((c for c in cells if c["split"] == "base"), None)
    return {
        "splits": splits,
        "base": pooled(base, list(base["heldout"]["per_node"])) if base else None,
        "goal": goal(splits),
    }


def _order(splits: dict) -> list[str]:
    return ([SOLO] if SOLO in splits else []) + sorted(s for s in splits if s != SOLO)


def spread_line(a: dict) -> str:
    """`Aha spread:` then the unhinted nodes' held-out strict pass@1 per split (8/0 first),
    then the hinted node's, each as mean [low, high] over seeds."""
    splits = a["splits"]
    order = _order(splits)
    unhinted = "; ".join(f"{s} {_iv(splits[s]['unhinted_interval'])}" for s in order)
    hinted = "; ".join(f"{s} {_iv(splits[s]['hinted_interval'])}" for s in order)
    seeds = ", ".join(f"{s}: {len(splits[s]['seeds'])} seed(s)" for s in order)
    return (
        f"Aha spread: unhinted nodes' held-out strict pass@1: {unhinted}. "
        f"Hinted node: {hinted}. ({seeds}; 95% t-intervals over seeds.)"
    )


def _iv(iv: Interval) -> str:
    if iv.low is None:
        return f"{iv.mean:.3f} [one seed]"
    return f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def goal(splits: dict) -> dict | None:
    """Issue 45's goal for the best sharing split against 8/0 (3 seeds or more each): the
    unhinted nodes' held-out pass@1 at least 2x and 0.15 above 8/0's, the intervals apart. A
    split run on fewer seeds is the best only when none has 3."""
    if SOLO not in splits:
        return None
    solo = splits[SOLO]["unhinted_interval"]
    shared = [s for s in splits if s != SOLO]
    if not shared:
        return None
    # the best among the splits with 3 seeds (a split with fewer cannot decide it), else the best
    decided = [s for s in shared if splits[s]["unhinted_interval"].n >= 3] or shared
    best = max(decided, key=lambda s: splits[s]["unhinted_interval"].mean)
    iv = splits[best]["unhinted_interval"]
    enough = min(iv.n, solo.n) >= 3
    apart = iv.low is not None and solo.high is not None and iv.low > solo.high
    met = (
        enough and iv.mean >= GOAL_RATIO * solo.mean and iv.mean - solo.mean >= GOAL_GAIN and apart
    )
    return {"best": best, "met": met, "enough": enough, "apart": apart, "gain": iv.mean - solo.mean}


def render(a: dict) -> list[str]:
    splits = a["splits"]
    if not splits:
        return []
    lines = ["", spread_line(a), ""]
    g = a["goal"]
    if g:
        solo, best = splits[SOLO]["unhinted_interval"], splits[g["best"]]["unhinted_interval"]
        ratio = f"{best.mean / solo.mean:.1f}x" if solo.mean > 0 else "from zero"
        verdict = "met" if g["met"] else "not met" if g["enough"] else "not decided yet"
        why = "" if g["enough"] else " (fewer than 3 seeds in one of the two)"
        lines += [
            f"Goal (unhinted nodes under the best sharing split >= 2x and >= 0.15 above 8/0's, "
            f"intervals apart, 3 seeds): **{verdict}**{why}. Best split {g['best']}: "
            f"{best.mean:.3f} against {solo.mean:.3f} ({ratio}, {g['gain']:+.3f}; intervals "
            f"{'apart' if g['apart'] else 'overlap or missing'}).",
            "",
        ]
    if a["base"] is not None:
        lines += [f"Base model, asked without the example, strictly: {a['base']:.3f}.", ""]
    lines += [
        "How it spread, per unhinted node: groups of the hinted node it trained on over the run, "
        "the first round in which one of its own answers was right and tagged (- = never), and "
        "its share of answers in tags in the last round:",
        "",
        "| split | seed | per unhinted node: groups from the hinted node, first tagged right "
        "round, last tagged share |",
        "|---|---|---|",
    ]
    for split in _order(splits):
        for seed, nodes in splits[split]["mechanism"].items():
            per = "; ".join(
                f"{n}: {k}, {'-' if r is None else r}, {t:.2f}" for n, (k, r, t) in nodes.items()
            )
            lines.append(f"| {split} | {seed} | {per} |")
    return lines


def plot(label: str, cells: list[dict], target: Path) -> Path | None:
    """Per round, mean over seeds: the unhinted nodes' share of tagged answers and strict reward
    (solid) and the hinted node's (dashed), one colour per split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_split: dict[str, list[dict]] = {}
    for c in cells:
        if c["split"] != "base" and "strict_reward" in c:
            by_split.setdefault(c["split"], []).append(c)
    if not by_split:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for k, split in enumerate(_order(by_split)):
        colour = f"C{k}"
        for ax, key in zip(axes, ("tagged_share", "strict_reward"), strict=True):
            for who, style in ((1, "-"), (0, "--")):
                curves = [
                    [
                        statistics.fmean(x)
                        for x in zip(*(c[key][n] for n in roles(c)[who]), strict=False)
                    ]
                    for c in by_split[split]
                ]
                n = min(len(cv) for cv in curves)
                mean = [statistics.fmean(cv[i] for cv in curves) for i in range(n)]
                name = f"{split}, {'unhinted' if who else 'hinted'} ({len(curves)} seed(s))"
                ax.plot(range(n), mean, style, color=colour, label=name)
    axes[0].set_ylabel("share of own answers in <answer> tags")
    axes[1].set_ylabel("strict reward (right and tagged)")
    for ax in axes:
        ax.set_xlabel("round")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{label}: the format spreading from the hinted node (mean over seeds)")
    fig.tight_layout()
    target.mkdir(parents=True, exist_ok=True)
    path = target / "aha_spread.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
