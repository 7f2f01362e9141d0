"""docs/results.md and the plots, rebuilt from whatever cell summaries exist.

    .venv/bin/python experiments/evidence_report.py        # or: evidence.py --report-only

Reads docs/evidence/<label>/*.json (written by experiments/evidence.py, one per finished seed x
split) and writes the generated part of docs/results.md: per split the mean over seeds of the
swarm's cumulative reward with a 95% t-interval, the paired per-seed differences (4/4 - 8/0, and
the adaptive and +targeted splits against both), the 4/4 : 8/0 ratio, the ratio over the first
12 rounds (one lesson: issue 32's fair target), held-out pass@1 with its
standard error, the J each adaptive split chose (a plot per split),
and a reading derived from those numbers alone. Everything after the NOTES marker in
docs/results.md is written by hand and kept.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aha_report  # noqa: E402
import prank_report  # noqa: E402
import report_scope  # noqa: E402
from stats import Interval, interval, paired, proportion_interval  # noqa: E402

NOTES = (
    "<!-- notes: written by hand, kept when experiments/evidence_report.py rebuilds this file -->"
)
ORDER = (
    "8/0",
    "6/2",
    "4/4",
    "2/6",
    "adaptive",
    "4/4+targeted",
    "adaptive+targeted",
    "4/4+no-negatives",
)
# rounds one lesson holds: issue 32's fair target is the best policy >= 1.1x 8/0's cumulative
# reward over them, the paired interval above 1x, and held-out pass@1 not below 8/0's
LESSON = 12
LESSON_TARGET = 1.1
COMPARISONS = (
    ("4/4", "8/0"),
    ("adaptive", "8/0"),
    ("adaptive", "4/4"),
    ("4/4+targeted", "8/0"),
    ("4/4+targeted", "4/4"),
    ("adaptive+targeted", "8/0"),
    ("adaptive+targeted", "4/4"),
    ("4/4+no-negatives", "8/0"),
    ("4/4+no-negatives", "4/4"),
    ("4/4+no-negatives", "4/4+targeted"),
)


def load_summaries(docs: Path) -> tuple[dict[str, list[dict]], list[str]]:
    """{label: [summary, ...]} and the files that could not be read (named, then skipped)."""
    found: dict[str, list[dict]] = {}
    bad: list[str] = []
    for path in sorted((docs / "evidence").glob("*/*.json")):
        try:
            s = json.loads(path.read_text(encoding="utf-8"))
            s["split"], s["heldout"]["pass_at_1"]  # noqa: B018 - the keys every summary has
        except (OSError, ValueError, KeyError, TypeError) as e:
            bad.append(f"{path}: {type(e).__name__} {e}")
            continue
        found.setdefault(path.parent.name, []).append(s)
    return found, bad


def rounds_of(cell: dict) -> int:
    """The rounds the cell ran: its longest node's (a hinted node with hint_rounds stops early;
    the others run on)."""
    return max(len(r) for r in cell["rewards"].values())


def swarm_per_round(cell: dict) -> list[float]:
    """The swarm's reward in each round: the sum over nodes of their mean training reward (a
    node that stopped adds nothing from then on)."""
    return [
        sum(r[i] for r in cell["rewards"].values() if i < len(r)) for i in range(rounds_of(cell))
    ]


def halves(a: dict, b: dict) -> tuple[int, int, float, float] | None:
    """(k, n, early, late): a - b's swarm reward per round, averaged over the first k and the
    last k of the n rounds both cells ran (k = n // 2; an odd n leaves its middle round out, so
    the two halves weigh the same). None under 2 rounds."""
    ra, rb = swarm_per_round(a), swarm_per_round(b)
    n = min(len(ra), len(rb))
    k = n // 2
    if k < 1:
        return None
    diff = [x - y for x, y in zip(ra[:n], rb[:n], strict=True)]
    return k, n, sum(diff[:k]) / k, sum(diff[n - k :]) / k


def lesson_ratio(a: dict, b: dict, rounds: int = LESSON) -> float | None:
    """a : b, the swarm's cumulative reward over the first `rounds` rounds (what one lesson
    holds); None unless both cells ran that many and b earned something."""
    ra, rb = swarm_per_round(a), swarm_per_round(b)
    if min(len(ra), len(rb)) < rounds:
        return None
    tb = sum(rb[:rounds])
    return sum(ra[:rounds]) / tb if tb > 0 else None


def split_order(splits) -> list[str]:
    """The known splits in ORDER, then any other (4/4+targeted+no-negatives, 3/5) by name."""
    return [s for s in ORDER if s in splits] + sorted(s for s in splits if s not in ORDER)


def comparisons_for(order: list[str]) -> list[tuple[str, str]]:
    """COMPARISONS, and each split not in ORDER against the paper's two references."""
    extra = [(x, ref) for x in order if x not in ORDER for ref in ("8/0", "4/4") if ref in order]
    return list(COMPARISONS) + extra


def analyse(cells: list[dict]) -> dict:
    base = next((c for c in cells if c["split"] == "base"), None)
    splits: dict[str, dict] = {}
    for c in cells:
        if c["split"] != "base":
            splits.setdefault(c["split"], {})[c["seed"]] = c
    order = split_order(splits)
    per_split = {}
    for split in order:
        by_seed = splits[split]
        per_split[split] = {
            "seeds": sorted(by_seed),
            "total": {s: c["total"] for s, c in by_seed.items()},
            "total_interval": interval([c["total"] for c in by_seed.values()]),
            "heldout_interval": heldout_interval(list(by_seed.values())),
            "heldout_se_max": max((c["heldout"]["se"] or 0.0) for c in by_seed.values()),
            "completions": min(c["heldout"]["completions"] for c in by_seed.values()),
            "rounds": min(rounds_of(c) for c in by_seed.values()),
            "nodes": min(len(c["cumulative"]) for c in by_seed.values()),
        }
    comparisons = {}
    for a, b in comparisons_for(order):
        if a in per_split and b in per_split:
            diffs, iv = paired(per_split[a]["total"], per_split[b]["total"])
            if not diffs:  # no seed ran both yet: nothing to pair, no empty row
                continue
            ta, tb = per_split[a]["total"], per_split[b]["total"]
            ratios = {s: ta[s] / tb[s] for s in diffs if tb[s] > 0}
            by_a, by_b = splits[a], splits[b]
            lesson = {s: r for s in diffs if (r := lesson_ratio(by_a[s], by_b[s])) is not None}
            comparisons[(a, b)] = {
                "lesson": lesson,
                "lesson_interval": interval(list(lesson.values())) if lesson else None,
                "heldout_diffs": paired(
                    {s: c["heldout"]["pass_at_1"] for s, c in by_a.items()},
                    {s: c["heldout"]["pass_at_1"] for s, c in by_b.items()},
                )[0],
                "halves": {s: h for s in diffs if (h := halves(by_a[s], by_b[s])) is not None},
                "diffs": diffs,
                "interval": iv,
                "ratios": ratios,
                "ratio_interval": interval(list(ratios.values())) if ratios else None,
            }
    adaptive_j: dict[str, dict[int, int]] = {}  # per adaptive split: J -> node-rounds
    for split in (s for s in order if s.startswith("adaptive")):
        counts: dict[int, int] = {}
        for c in splits[split].values():
            for js in c["external_target"].values():
                for j in js:
                    counts[j] = counts.get(j, 0) + 1
        adaptive_j[split] = dict(sorted(counts.items()))
    targeted = {  # per +targeted split: (peer groups picked for being wanted, peer groups trained)
        split: tuple(
            sum(sum(v) for c in splits[split].values() for v in c.get(key, {}).values())
            for key in ("external_targeted", "external_used")
        )
        for split in order
        if "+targeted" in split
    }
    return {
        "base": base,
        "splits": per_split,
        "cost": {split: cost(list(splits[split].values())) for split in order},
        "comparisons": comparisons,
        "adaptive_j": adaptive_j,
        "targeted": targeted,
        "ceiling": ceiling(splits),
        "task": task_line(cells[0]["config"]) if cells and "config" in cells[0] else "",
    }


def heldout_interval(cells: list[dict]):
    """Held-out pass@1 over seeds with an interval inside [0, 1] (stats.proportion_interval):
    each cell's right answers (its scores' sum) of its completions."""
    h = [c["heldout"] for c in cells]
    return proportion_interval([(x["pass_at_1"] * x["completions"], x["completions"]) for x in h])


TASK_KEYS = ("min_terms", "max_terms", "min_digits", "max_digits", "operators")  # shown per domain


def task_line(config: dict) -> str:
    """What the cells were asked and how it was scored, from a summary's config (the same in
    every cell of an experiment but for seed and mix)."""
    parts = []
    for domain in config.get("domains", {}):
        dc = config.get("domain_configs", {}).get(domain, {})
        shown = ", ".join(
            f"{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in dc.items()
            if k in TASK_KEYS
        )
        parts.append(f"{domain}" + (f" ({shown})" if shown else ""))
    line = "Task: " + "; ".join(parts) + "."
    if config.get("lenient"):
        line += f" A right answer earns 1.0 in <answer> tags, {config.get('lenient_credit', 0.5)} untagged."
    if config.get("format_example"):
        line += " Each prompt shows one worked example of the answer format (format_example)."
    return line


def cost(cells: list[dict]) -> dict | None:
    """What a split's training bought per CPU-minute of a node, over the cells whose every
    node-round recorded its CPU seconds (evidence summaries from 2026-11-26 on): reward summed
    over node-rounds, CPU seconds summed, node-rounds, and how many cells that is."""
    timed = [
        c
        for c in cells
        if c.get("round_cpu_seconds")
        and all(x is not None for v in c["round_cpu_seconds"].values() for x in v)
    ]
    if not timed:
        return None
    return {
        "cells": len(timed),
        "of": len(cells),
        "reward": sum(sum(r) for c in timed for r in c["rewards"].values()),
        "cpu_seconds": sum(sum(v) for c in timed for v in c["round_cpu_seconds"].values()),
        "node_rounds": sum(len(r) for c in timed for r in c["rewards"].values()),
    }


def ceiling(splits: dict[str, dict]) -> dict | None:
    """The highest mean reward any node reached in a round, and what 8/0's seeds would have
    earned had every node sat at it from round 1 on (round 0 is before any training, the same in
    every split): the most any split could earn while rewards go no higher. None unless 8/0 ran
    at least 8 rounds and sat there: its last quarter of rounds within 10% of that top and no
    more than 10% of it above the quarter before (a run still climbing shows no ceiling)."""
    top = max(
        (
            max(r)
            for cells in splits.values()
            for c in cells.values()
            for r in c["rewards"].values()
        ),
        default=None,
    )
    solo = splits.get("8/0")
    if top is None or top <= 0 or not solo:
        return None
    rounds = min(len(r) for c in solo.values() for r in c["rewards"].values())
    q = rounds // 4
    if q < 2:
        return None

    def mean(a: int, b: int) -> float:
        return statistics.fmean(
            x for c in solo.values() for r in c["rewards"].values() for x in r[a:b]
        )

    last, before = mean(rounds - q, rounds), mean(rounds - 2 * q, rounds - q)
    if last < 0.9 * top or last - before > 0.1 * top:
        return None
    bound = {
        s: sum(r[0] + (len(r) - 1) * top for r in c["rewards"].values()) / c["total"]
        for s, c in solo.items()
        if c["total"] > 0
    }
    return {"top": top, "bound": bound}


def _iv(iv: Interval | None, digits: int = 2) -> str:
    return "-" if iv is None else iv.text(digits)


def reading(a: dict, goals: frozenset[str] = frozenset()) -> list[str]:
    """Sentences that follow from the numbers alone (no judgement written in advance); a goal's
    line only for the goals set for this experiment (report_scope.GOALS)."""
    out = []
    for (x, y), c in a["comparisons"].items():
        iv, n = c["interval"], len(c["diffs"])
        if iv is None:
            continue
        if iv.low is None:
            out.append(f"{x} - {y}: one paired seed ({iv.mean:+.2f}); no interval yet.")
        elif iv.excludes(0):
            side = "more" if iv.mean > 0 else "less"
            out.append(
                f"{x} earned {side} cumulative reward than {y}: paired difference over {n} "
                f"seeds {iv.text()}, a 95% interval that excludes 0."
            )
        else:
            out.append(
                f"{x} - {y} over {n} seeds: {iv.text()}; the interval includes 0, so these seeds "
                "do not show a difference."
            )
    for (x, y), c in a["comparisons"].items():
        h = c["halves"]
        if h:
            early = sum(e for _, _, e, _ in h.values()) / len(h)
            late = sum(v for _, _, _, v in h.values()) / len(h)
            spans = {(k, n) for k, n, _, _ in h.values()}
            if len(spans) == 1:
                ((k, n),) = spans
                first, last = f"rounds 1-{k}", f"rounds {n - k + 1}-{n}"
            else:  # seeds that ran different numbers of rounds: their own halves
                first, last = "the first half", "the second half"
            who = f"{x} gained on {y}" if late > early else f"{y} gained on {x}"
            who += f" by {abs(late - early):.3f} a round"  # how much, so a sliver reads as one
            out.append(
                f"{x} - {y} per round (mean over {len(h)} seed(s)): {early:+.3f} in {first}, "
                f"{late:+.3f} in {last}: "
                + (who if late != early else "neither gained on the other")
                + " as training went on."
            )
    for (x, y), c in a["comparisons"].items():
        r = c.get("lesson_interval")
        if y != "8/0" or r is None or report_scope.LESSON not in goals:
            continue
        held = c["heldout_diffs"]
        held_mean = interval(list(held.values())).mean
        met = r.low is not None and r.low > 1.0 and r.mean >= LESSON_TARGET and held_mean >= 0
        out.append(
            f"{x} : 8/0 over rounds 1-{LESSON} (one lesson), cumulative reward ratio "
            f"{r.text(3)}; held-out pass@1 {x} - 8/0 {held_mean:+.3f} (mean over "
            f"{len(held)} seed(s)): the fair target (>= {LESSON_TARGET}x with the interval "
            f"above 1x, held-out not below 8/0's) is {'met' if met else 'not met'}."
        )
    for (x, y), c in a["comparisons"].items():  # the issue's goal, for every split against 8/0
        r = c["ratio_interval"]
        if y != "8/0" or r is None or report_scope.CUMULATIVE not in goals:
            continue
        goal = r.low is not None and r.mean >= 1.5 and r.excludes(1.0)
        out.append(
            f"{x} : 8/0 cumulative reward ratio {r.text()}: the goal (>= 1.5x with the interval "
            f"excluding 1x) is {'met' if goal else 'not met'}."
        )
    for split, (picked, used) in a.get("targeted", {}).items():
        if used and not picked:
            out.append(
                f"{split} never picked a peer group for being wanted: every peer group it "
                "trained came from the uniform draw, so it ran as "
                f"{split.replace('+targeted', '')} with uniform samples."
            )
    top = a.get("ceiling")
    if top and top["bound"]:
        b = sorted(top["bound"].values())
        span = f"{b[0]:.2f}" if len(b) == 1 else f"{b[0]:.2f}-{b[-1]:.2f}"
        out.append(
            f"8/0 ended near a ceiling: no node's mean reward in a round went above "
            f"{top['top']:.3f}. Had every node sat there from round 1, the swarm would have "
            f"earned {span}x 8/0's "
            "cumulative reward: the most any split can reach while rewards stop at that value."
        )
    s = a["splits"]
    if "adaptive" in s:
        fixed = {k: v["total_interval"].mean for k, v in s.items() if k != "adaptive"}
        if fixed:
            best = max(fixed, key=fixed.get)
            ad = s["adaptive"]["total_interval"].mean
            out.append(
                f"adaptive's mean cumulative reward {ad:.2f} vs the best fixed split's ({best}) "
                f"{fixed[best]:.2f}: {'at or above' if ad >= fixed[best] else 'below'} it "
                "(means over the seeds each ran; see the paired rows for the interval)."
            )
    return out


def render(label: str, a: dict) -> str:
    lines = [f"## Experiment `{label}`", ""]
    any_split = next(iter(a["splits"].values()), None)
    if any_split:
        lines.append(
            f"{any_split['nodes']} nodes, {any_split['rounds']} rounds. Cumulative reward = the "
            "swarm's total: the sum over nodes and rounds of each node's mean training reward."
        )
        lines.append("")
    if a.get("task"):
        lines += [a["task"], ""]
    lines += [report_scope.baseline(label), ""]
    if not a["splits"]:
        lines.append("No trained cell has finished yet.")
    else:
        lines += [
            "| split | seeds | cumulative reward, mean [95% CI] | held-out pass@1, mean [95% CI] "
            "| max SE per seed | completions per seed |",
            "|---|---|---|---|---|---|",
        ]
    for split, v in a["splits"].items():
        lines.append(
            f"| {split} | {','.join(map(str, v['seeds']))} | {_iv(v['total_interval'])} | "
            f"{_iv(v['heldout_interval'], 3)} | {v['heldout_se_max']:.4f} | {v['completions']} |"
        )
    if a["splits"]:
        lines += [
            "",
            "Held-out intervals are over seeds on the logit scale and stay inside [0, 1] "
            "(experiments/stats.py: proportion_interval); the others are Student t over seeds.",
        ]
    if a["base"]:
        h = a["base"]["heldout"]
        lines += [
            "",
            f"Base model, held-out pass@1: {h['pass_at_1']:.3f} (SE {h['se']:.4f}, "
            f"{h['completions']} completions).",
        ]
    if a["comparisons"]:
        lines += ["", "Paired by seed (same questions and sampling seeds in both splits):", ""]
        lines += [
            "| comparison | per seed | mean [95% CI] | ratio per seed | ratio mean [95% CI] |"
        ]
        lines += ["|---|---|---|---|---|"]
        for (x, y), c in a["comparisons"].items():
            per = ", ".join(f"{s}: {d:+.2f}" for s, d in c["diffs"].items())
            rat = ", ".join(f"{s}: {r:.3f}" for s, r in c["ratios"].items())
            lines.append(
                f"| {x} - {y} | {per} | {_iv(c['interval'])} | {rat} | "
                f"{_iv(c['ratio_interval'], 3)} |"
            )
    if a["comparisons"]:
        lines += [
            "",
            "The same differences by half of the run (does the gap grow with training?):",
            "",
        ]
        lines += ["| comparison | per seed: reward per round, first half and second half |"]
        lines += ["|---|---|"]
        for (x, y), c in a["comparisons"].items():
            per = "; ".join(
                f"{s}: rounds 1-{k} {e:+.3f}, {n - k + 1}-{n} {v:+.3f}"
                for s, (k, n, e, v) in c["halves"].items()
            )
            lines.append(f"| {x} - {y} | {per} |")
    lessons = {k: c for k, c in a["comparisons"].items() if c.get("lesson")}
    if lessons:
        lines += [
            "",
            f"The first {LESSON} rounds (what one lesson holds): cumulative reward ratio, and "
            "held-out pass@1 at the end of the run:",
            "",
            "| comparison | ratio per seed | ratio mean [95% CI] | held-out difference per seed |",
            "|---|---|---|---|",
        ]
        for (x, y), c in lessons.items():
            rat = ", ".join(f"{s}: {r:.3f}" for s, r in c["lesson"].items())
            held = ", ".join(f"{s}: {d:+.3f}" for s, d in c["heldout_diffs"].items())
            lines.append(f"| {x} : {y} | {rat} | {_iv(c['lesson_interval'], 3)} | {held} |")
    for split, counts in a["adaptive_j"].items():
        total = sum(counts.values())
        shares = ", ".join(f"J={j}: {n / total:.0%}" for j, n in counts.items())
        name = "Adaptive" if split == "adaptive" else split
        lines += ["", f"{name}: J chosen over all node-rounds: {shares}."]
    costs = {k: v for k, v in a.get("cost", {}).items() if v}
    if costs:
        lines += [
            "",
            "What a node's CPU time bought (cells whose every round recorded it; CPU seconds are "
            "about a quiet machine's seconds, on the machine that ran the cell):",
            "",
            "| split | cells | reward per node-round | CPU s per node-round | "
            "reward per node CPU-minute |",
            "|---|---|---|---|---|",
        ]
        for split, v in costs.items():
            per_round = v["cpu_seconds"] / v["node_rounds"]
            lines.append(
                f"| {split} | {v['cells']} of {v['of']} | {v['reward'] / v['node_rounds']:.3f} | "
                f"{per_round:.1f} | {60 * v['reward'] / v['cpu_seconds']:.3f} |"
            )
    for split, (picked, used) in a["targeted"].items():
        lines += [
            "",
            f"{split}: {picked} of the {used} peer groups trained were picked for being wanted "
            "(rl/targeting.py); the rest came from the uniform draw.",
        ]
    text = reading(a, report_scope.goals(label))
    if text:
        lines += ["", "What these numbers say (generated from them):", ""]
        lines += [f"- {t}" for t in text]
    lines.append("")
    return "\n".join(lines)


def plots(label: str, cells: list[dict], target: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    target.mkdir(parents=True, exist_ok=True)
    by_split: dict[str, list[dict]] = {}
    for c in cells:
        if c["split"] != "base":
            by_split.setdefault(c["split"], []).append(c)
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for split in split_order(by_split):
        curves = []
        for c in by_split[split]:
            run, acc = [], 0.0
            for x in swarm_per_round(c):
                acc += x
                run.append(acc)
            curves.append(run)
        n = min(len(cv) for cv in curves)
        mean = [sum(cv[i] for cv in curves) / len(curves) for i in range(n)]
        lo = [min(cv[i] for cv in curves) for i in range(n)]
        hi = [max(cv[i] for cv in curves) for i in range(n)]
        (line,) = ax.plot(range(1, n + 1), mean, label=f"{split} ({len(curves)} seed(s))")
        if len(curves) > 1:
            ax.fill_between(range(1, n + 1), lo, hi, alpha=0.15, color=line.get_color())
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("cumulative reward (sum over nodes)")
    ax.set_title(f"{label}: mean over seeds (band: min-max over seeds)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(target / "cumulative_reward.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    for split in (s for s in split_order(by_split) if s.startswith("adaptive")):
        fig, ax = plt.subplots(figsize=(7, 3.5))
        rounds = min(c["rounds_done"] for c in by_split[split])
        arms = sorted(
            {j for c in by_split[split] for js in c["external_target"].values() for j in js}
        )
        bottom = [0.0] * rounds
        for j in arms:
            share = []
            for i in range(rounds):
                picks = [js[i] for c in by_split[split] for js in c["external_target"].values()]
                share.append(picks.count(j) / len(picks))
            colour = f"C{j // 2}"  # the same colour for a J in every plot
            ax.bar(range(1, rounds + 1), share, bottom=bottom, label=f"J={j}", color=colour)
            bottom = [b + s for b, s in zip(bottom, share, strict=True)]
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("share of nodes")
        ax.set_title(f"{label}: J chosen by the {split} nodes")
        ax.legend(ncol=4, fontsize=8)
        fig.tight_layout()
        paths.append(target / f"{split.replace('+', '-')}_j.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


HEADER = """# Evidence: does sharing help? (seeds, intervals, the new policies)

Generated by `experiments/evidence_report.py` from the cell summaries in `docs/evidence/`
(one JSON + table per finished seed x split, written by `experiments/evidence.py`). Notes by
hand follow the tables: where the experiments stand, what they show, and what is left to run.
"""


def write_results(docs: Path) -> Path:
    found, bad = load_summaries(docs)
    parts = [HEADER]
    if not found:
        parts.append(
            "**No summaries yet: the experiment has not been run.** The command, the plan and "
            "its estimated duration are in the notes below.\n"
        )
    for label, cells in sorted(found.items()):
        a = analyse(cells)
        parts.append(render(label, a))
        if aha_report.is_aha(cells):  # hinted nodes: did the format spread?
            goal = report_scope.AHA in report_scope.goals(label)
            parts.append("\n".join(aha_report.render(aha_report.analyse(cells), goal)) + "\n")
            p = aha_report.plot(label, cells, docs / "evidence" / label)
            if p is not None:
                parts.append(f"![{p.stem}](evidence/{label}/{p.name})\n")
        if prank_report.is_prank(cells):  # a classmate's phrase: did it spread, what stopped it?
            parts.append("\n".join(prank_report.render(prank_report.analyse(cells))) + "\n")
            p = prank_report.plot(label, cells, docs / "evidence" / label)
            if p is not None:
                parts.append(f"![{p.stem}](evidence/{label}/{p.name})\n")
        if a["splits"]:
            for p in plots(label, cells, docs / "evidence" / label):
                parts.append(f"![{p.stem}](evidence/{label}/{p.name})\n")
    if bad:
        parts.append("Summaries that could not be read (left out):\n")
        parts += [f"- `{b}`" for b in bad]
        parts.append("")
    path = docs / "results.md"
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    notes = old[old.index(NOTES) :] if NOTES in old else NOTES + "\n"
    path.write_text("\n".join(parts).rstrip() + "\n\n" + notes, encoding="utf-8")
    return path


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=Path, default=Path("docs"))
    print(f"wrote {write_results(ap.parse_args().docs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
