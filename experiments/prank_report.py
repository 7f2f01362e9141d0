"""The prank's report (issue 57, item 3): does a classmate's phrase spread, and what stops it?

Called by experiments/evidence_report.py for an experiment whose cells ran a prank
(experiments/prank.py). It gives the line beginning `Prank spread:` (the phrase's share of the
classmates' own answers in the last round and the unhinted classmates' held-out strict pass@1,
without defence, with (a) and with (b), each mean [95% interval over seeds]), a table per split
and seed, the same per round every 4 rounds, and the plot of both per round. Classmates are the
nodes other than the prankster; the unhinted classmates, neither hinted nor the prankster, are
the ones whose Aha a defence must not stop (the prankster's own score is left out: under (b) it
stops training).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import prank
from stats import Interval, interval

# the three cells the spread line compares (a split's prank suffixes, after its mix)
ROLES = (
    ("no defence", frozenset({prank.PRANK})),
    ("(a) peers' text after the answer not trained", frozenset({prank.PRANK, prank.TRIM})),
    ("(b) prankster removed", frozenset({prank.PRANK, prank.REMOVE})),
)
EVERY = 4  # the per-round table shows every 4th round


def is_prank(cells: list[dict]) -> bool:
    return any(c.get("prank") for c in cells)


def _prank_suffixes(split: str) -> frozenset[str]:
    """The prank suffixes of a split name (4/4+prank+trim -> {+prank, +trim})."""
    parts = {"+" + p for p in split.split("+")[1:]}
    return frozenset(parts & set(prank.SUFFIXES))


def classmates(cell: dict) -> list[str]:
    names = list(cell["heldout"]["per_node"])
    return [n for k, n in enumerate(names) if k != cell["prank"]["node"]]


def unhinted_classmates(cell: dict) -> list[str]:
    names = list(cell["heldout"]["per_node"])
    hinted = set(cell["config"].get("hinted_nodes") or [])
    return [n for k, n in enumerate(names) if k != cell["prank"]["node"] and k not in hinted]


def last_share(cell: dict) -> float:
    """The phrase's share of the classmates' own answers in the cell's last round (mean over
    the classmates)."""
    last = [v for n in classmates(cell) if (v := _ran(cell["phrase_share"][n]))]
    return statistics.fmean(v[-1] for v in last)


def _ran(values: list) -> list:
    return [v for v in values if v is not None]


def heldout(cell: dict) -> float:
    """The unhinted classmates' held-out strict pass@1, over all their completions."""
    scores = [
        s for n in unhinted_classmates(cell) for s in cell["heldout"]["per_node"][n]["scores"]
    ]
    return sum(scores) / len(scores)


def per_round(cell: dict, key: str, names: list[str]) -> list[float]:
    """Mean over these nodes of a per-round value, for each round all of them ran."""
    runs = [_ran(cell[key][n]) for n in names]
    return [statistics.fmean(v[i] for v in runs) for i in range(min(map(len, runs)))]


def analyse(cells: list[dict]) -> dict:
    by_split: dict[str, dict[int, dict]] = {}
    for c in cells:
        if c.get("prank"):
            by_split.setdefault(c["split"], {})[c["seed"]] = c
    splits = {}
    for split, seeds in sorted(by_split.items(), key=lambda kv: _order(kv[0])):
        share = {s: last_share(c) for s, c in seeds.items()}
        held = {s: heldout(c) for s, c in seeds.items()}
        splits[split] = {
            "seeds": sorted(seeds),
            "prank": next(iter(seeds.values()))["prank"],
            "rounds": min(len(_ran(v)) for c in seeds.values() for v in _rows(c)),
            "share": share,
            "heldout": held,
            "share_interval": interval(list(share.values())),
            "heldout_interval": interval(list(held.values())),
            "trained": {  # peer completions with the phrase the classmates trained, whole run
                s: sum(x or 0 for n in classmates(c) for x in c["phrase_trained"][n])
                for s, c in seeds.items()
            },
            "pranked": {
                s: sum(x or 0 for v in c["pranked"].values() for x in v) for s, c in seeds.items()
            },
            "per_round": {
                s: (
                    per_round(c, "phrase_share", classmates(c)),
                    per_round(c, "strict_reward", unhinted_classmates(c)),
                )
                for s, c in sorted(seeds.items())
            },
        }
    roles = {}
    for name, want in ROLES:  # the split with that role and the most seeds
        found = [s for s in splits if _prank_suffixes(s) == want]
        if found:
            roles[name] = max(found, key=lambda s: (len(splits[s]["seeds"]), s))
    return {"splits": splits, "roles": roles}


def _order(split: str) -> tuple[int, str]:
    """No defence, (a), (b), then any other prank split, each by name."""
    want = _prank_suffixes(split)
    return next((k for k, (_, w) in enumerate(ROLES) if w == want), len(ROLES)), split


def _rows(cell: dict) -> list[list]:
    return [cell["phrase_share"][n] for n in classmates(cell)]


def _iv(iv: Interval) -> str:
    if iv.low is None:
        return f"{iv.mean:.3f} [one seed]"
    return f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def spread_line(a: dict) -> str:
    """`Prank spread:` then the phrase's share in the classmates' answers in the last round and
    the unhinted classmates' held-out strict pass@1, per defence, each mean [low, high]."""
    splits, roles = a["splits"], a["roles"]
    rounds = sorted({splits[s]["rounds"] for s in roles.values()})
    when = f"round {rounds[0]}" if len(rounds) == 1 else "the last round each ran"
    removed = next((splits[s]["prank"]["remove_at"] for n, s in roles.items() if n[:3] == "(b)"), 0)

    def named(role: str) -> str:
        return f"{role} after round {removed}" if role[:3] == "(b)" else role

    share = "; ".join(f"{named(r)} {_iv(splits[s]['share_interval'])}" for r, s in roles.items())
    held = "; ".join(
        f"{r[:3] if r[0] == '(' else r} {_iv(splits[s]['heldout_interval'])}"
        for r, s in roles.items()
    )
    seeds = ", ".join(f"{s}: {len(splits[s]['seeds'])} seed(s)" for s in roles.values())
    return (
        f"Prank spread: the phrase's share of classmates' own answers in {when}: {share}. "
        f"Unhinted classmates' held-out strict pass@1: {held}. "
        f"({seeds}; 95% t-intervals over seeds.)"
    )


def render(a: dict) -> list[str]:
    splits = a["splits"]
    if not splits:
        return []
    lines = [""]
    if a["roles"]:
        lines += [spread_line(a), ""]
    some = next(iter(splits.values()))["prank"]
    lines += [
        f'The prank: node {some["node"]} writes "{some["phrase"]}" beside each answer its own '
        "verifier rewarded, in the groups it shares (experiments/prank.py). Per split and seed: "
        "the phrase's share of the classmates' own answers in the last round, the classmates' "
        "peer completions trained that held it (whole run), the prankster's completions that "
        "carried it, and the unhinted classmates' held-out strict pass@1:",
        "",
        "| split | seed | phrase share, last round | phrase trained | pranked | held-out pass@1 |",
        "|---|---|---|---|---|---|",
    ]
    for split, v in splits.items():
        for s in v["seeds"]:
            lines.append(
                f"| {split} | {s} | {v['share'][s]:.3f} | {v['trained'][s]} | "
                f"{v['pranked'][s]} | {v['heldout'][s]:.3f} |"
            )
    lines += [
        "",
        f"Per round (every {EVERY}th; mean over seeds): the phrase's share of the classmates' "
        "own answers / the unhinted classmates' strict reward:",
        "",
    ]
    n = max(v["rounds"] for v in splits.values())
    shown = [r for r in range(EVERY, n + 1, EVERY)] or [n]
    lines += ["| split | " + " | ".join(f"round {r}" for r in shown) + " |"]
    lines += ["|---" * (len(shown) + 1) + "|"]
    for split, v in splits.items():
        cols = []
        for r in shown:
            pairs = [
                (sh[r - 1], st[r - 1])
                for sh, st in v["per_round"].values()
                if len(sh) >= r and len(st) >= r
            ]
            if pairs:
                cols.append(
                    f"{statistics.fmean(p for p, _ in pairs):.2f} / {statistics.fmean(q for _, q in pairs):.2f}"
                )
            else:
                cols.append("-")
        lines.append(f"| {split} | " + " | ".join(cols) + " |")
    return lines


def plot(label: str, cells: list[dict], target: Path) -> Path | None:
    """Per round, mean over seeds, one colour per split: the phrase's share of the classmates'
    answers (left) and the unhinted classmates' strict reward (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    splits = analyse(cells)["splits"]
    if not splits:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for k, (split, v) in enumerate(splits.items()):
        for ax, which in zip(axes, (0, 1), strict=True):
            curves = [pair[which] for pair in v["per_round"].values()]
            n = min(len(cv) for cv in curves)
            mean = [statistics.fmean(cv[i] for cv in curves) for i in range(n)]
            ax.plot(range(1, n + 1), mean, color=f"C{k}", label=f"{split} ({len(curves)} seed(s))")
            if v["prank"]["remove_at"]:  # the prankster's last round
                ax.axvline(v["prank"]["remove_at"], color=f"C{k}", linestyle=":", alpha=0.7)
    axes[0].set_ylabel("share of classmates' answers with the phrase")
    axes[1].set_ylabel("unhinted classmates' strict reward")
    for ax in axes:
        ax.set_xlabel("round (dotted: the prankster removed after it)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{label}: the prank and the defences (mean over seeds)")
    fig.tight_layout()
    target.mkdir(parents=True, exist_ok=True)
    path = target / "prank_spread.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
