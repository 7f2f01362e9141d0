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

import aha_lines
from stats import counts_of, exact_binomial, paired, proportion_interval

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
    k, n = counted(cell, names)
    return k / n


def counted(cell: dict, names: list[str]) -> tuple[int, int]:
    """(right, asked) over every held-out answer of these nodes (strict: each 0 or 1)."""
    return counts_of([s for n in names for s in cell["heldout"]["per_node"][n]["scores"]])


def solo_steps(seeds: dict[int, dict]) -> dict:
    """Under 8/0, over every seed's unhinted nodes: answers tagged of answers given (from each
    round's tagged share, questions x group size answers a round), and node-rounds in which a
    strict reward above 0 was earned of node-rounds run (in the others every own answer scored
    0 alike: every advantage 0, nothing trained)."""
    tagged = answers = rewarded = rounds = 0
    for c in seeds.values():
        per_round = c["config"].get("questions_per_round", 8) * c["config"].get("group_size", 4)
        for n in roles(c)[1]:
            shares = [x or 0.0 for x in c["tagged_share"][n]]
            tagged += sum(round(x * per_round) for x in shares)
            answers += per_round * len(shares)
            rewarded += sum(1 for x in c["strict_reward"][n] if x)
            rounds += len(c["strict_reward"][n])
    return {"tagged": tagged, "answers": answers, "rewarded": rewarded, "rounds": rounds}


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
        counts = {s: (counted(c, roles(c)[1]), counted(c, roles(c)[0])) for s, c in seeds.items()}
        splits[split] = {
            "seeds": sorted(seeds),
            "counts": dict(sorted(counts.items())),  # seed -> ((right, asked) unhinted, hinted)
            "unhinted": {s: k / n for s, ((k, n), _) in counts.items()},
            "hinted": {s: k / n for s, (_, (k, n)) in counts.items()},
            "unhinted_interval": proportion_interval([u for u, _ in counts.values()]),
            "hinted_interval": proportion_interval([h for _, h in counts.values()]),
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
        "solo": solo_steps(by_split[SOLO]) if SOLO in by_split else None,
        "paired": paired_unhinted(splits),
        "speedup": aha_lines.speedup(cells),
        "spread": aha_lines.spread(cells),
        "after_stop": aha_lines.after_stop_table(cells),
    }


def paired_unhinted(splits: dict) -> dict:
    """The unhinted nodes' held-out strict pass@1, paired by seed: each split against 8/0, and
    each other sharing split against 4/4."""
    pairs = [(x, SOLO) for x in splits if x != SOLO] + [
        (x, "4/4") for x in splits if x not in (SOLO, "4/4") and "4/4" in splits
    ]
    out = {}
    for x, y in pairs:
        if y in splits:
            diffs, iv = paired(splits[x]["unhinted"], splits[y]["unhinted"])
            if diffs:
                out[(x, y)] = (diffs, iv)
    return out


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
        f"Hinted node: {hinted}. ({seeds}; 95% intervals over seeds on the logit scale, inside "
        "[0, 1].)"
    )


def _iv(iv) -> str:
    """mean [low, high]; where every seed scored 0, the exact upper bound of all pooled."""
    text = f"{iv.mean:.3f} [one seed]" if iv.low is None else iv.text(3)
    if iv.successes == 0 and iv.pooled is not None:
        text += f" (0 of {iv.trials:,} right: exact 95% upper bound {iv.pooled[1]:.4f})"
    return text


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


def render(a: dict, with_goal: bool = True) -> list[str]:
    """The Aha section; issue 45's goal line only where that goal was set (with_goal)."""
    splits = a["splits"]
    if not splits:
        return []
    lines = ["", spread_line(a), ""]
    lines += [aha_lines.speedup_line(a["speedup"]), ""] if a["speedup"] else []
    lines += [aha_lines.spread_line(a["spread"]), ""] if a["spread"] else []
    g = a["goal"] if with_goal else None
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
    if a["solo"]:
        s = a["solo"]
        lines += [
            f"Under 8/0 the unhinted nodes tagged {s['tagged']:,} of their {s['answers']:,} own "
            f"answers and earned a strict reward above 0 in {s['rewarded']} of their "
            f"{s['rounds']} node-rounds; in each node-round without one, every answer scored 0 "
            "alike: every advantage was 0 and no training step was taken.",
            "",
        ]
    lines += _cells_table(splits) + _paired_table(a["paired"]) + a["after_stop"] + [""]
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


def _exact(k: int, n: int) -> str:
    low, high = exact_binomial(k, n)
    return f"{k} of {n}: {k / n:.3f} [{low:.3f}, {high:.3f}]"


def _cells_table(splits: dict) -> list[str]:
    """Each cell's held-out strict pass@1 with its exact (Clopper-Pearson) 95% interval."""
    lines = [
        "Each cell's held-out strict pass@1, right of asked, with its exact binomial 95% interval:",
        "",
        "| split | seed | unhinted nodes | hinted node |",
        "|---|---|---|---|",
    ]
    for split in _order(splits):
        for seed, (u, h) in splits[split]["counts"].items():
            lines.append(f"| {split} | {seed} | {_exact(*u)} | {_exact(*h)} |")
    return lines


def _paired_table(pairs: dict) -> list[str]:
    if not pairs:
        return []
    lines = [
        "",
        "The unhinted nodes' held-out strict pass@1 paired by seed (t-interval over seeds):",
        "",
        "| comparison | per seed | mean [95% CI] |",
        "|---|---|---|",
    ]
    for (x, y), (diffs, iv) in pairs.items():
        per = ", ".join(f"{s}: {d:+.3f}" for s, d in diffs.items())
        mean = f"{iv.mean:+.3f}" + ("" if iv.low is None else f" [{iv.low:+.3f}, {iv.high:+.3f}]")
        lines.append(f"| {x} - {y} | {per} | {mean} |")
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
