"""Issue 56's two generated lines and the table behind the second-order spread, from stored cell
summaries (called by experiments/aha_report.py).

- `Aha speed-up:` (experiments/aha_speedup.toml: every node told the format in its user turn,
  node 0 also shown the worked example): for 8/0 and then 4/4, the unhinted nodes' rounds to half
  their answers tagged and their held-out strict pass@1, each as mean [low, high] over seeds.
- `Second-order spread:` (node 0 stops after --hint-rounds; 4/4 against 4/4+alone, where every
  node trains alone from then on): the unhinted nodes' held-out strict pass@1 at the end under
  sharing and alone, and sharing minus alone paired by seed.
- after_stop_table: per unhinted node of a cell whose hinted node stopped, what it had when the
  source stopped and what it reached after.
"""

from __future__ import annotations

import statistics

from stats import Interval, counts_of, interval, paired, proportion_interval

SOLO, SHARED, ALONE = "8/0", "4/4", "4/4+alone"
HALF = 0.5


def _roles(cell: dict) -> tuple[list[str], list[str]]:
    names = list(cell["heldout"]["per_node"])
    hinted = set(cell["config"].get("hinted_nodes") or [])
    return [n for k, n in enumerate(names) if k in hinted], [
        n for k, n in enumerate(names) if k not in hinted
    ]


def unhinted_counts(cell: dict) -> tuple[int, int]:
    """(right, asked) over every held-out answer of the cell's unhinted nodes (strict: 0 or 1)."""
    per = cell["heldout"]["per_node"]
    return counts_of([s for n in _roles(cell)[1] for s in per[n]["scores"]])


def rounds_to_half(tagged: list[float | None]) -> int | None:
    """The first round (counted from 1) in which at least half of a node's answers were tagged."""
    return next((r + 1 for r, x in enumerate(tagged) if x is not None and x >= HALF), None)


def _by_split(cells: list[dict]) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for c in cells:
        if c["split"] != "base" and "tagged_share" in c:
            out.setdefault(c["split"], {})[c["seed"]] = c
    return out


def _bounded(xs: list[float], low: float, high: float) -> Interval:
    """A t-interval over seeds, cut to [low, high] (rounds cannot go below 1 or past the end)."""
    iv = interval(xs)
    if iv.low is not None:
        iv.low, iv.high = max(low, iv.low), min(high, iv.high)
    return iv


def speedup(cells: list[dict]) -> dict | None:
    """Per split (8/0, 4/4) over seeds: the unhinted nodes' mean round to half tagged (a node
    that never got there counts as the rounds run + 1) and their held-out strict pass@1."""
    splits = _by_split(cells)
    if not (SOLO in splits and SHARED in splits):
        return None
    if not all(
        c["config"].get("format_instruction") for s in (SOLO, SHARED) for c in splits[s].values()
    ):
        return None
    out = {}
    for split in (SOLO, SHARED):
        rounds, counts, late, nodes = [], [], 0, 0
        run = max(len(v) for c in splits[split].values() for v in c["tagged_share"].values())
        for c in splits[split].values():
            per = [rounds_to_half(c["tagged_share"][n]) for n in _roles(c)[1]]
            late += sum(r is None for r in per)
            nodes += len(per)
            rounds.append(statistics.fmean(run + 1 if r is None else r for r in per))
            counts.append(unhinted_counts(c))
        out[split] = {
            "seeds": sorted(splits[split]),
            "rounds": _bounded(rounds, 1, run + 1),
            "pass": proportion_interval(counts),
            "never": (late, nodes),
            "run": run,
        }
    return out


def speedup_line(s: dict) -> str:
    parts = [
        f"{split} rounds to half tagged {_t(s[split]['rounds'], 1)}, held-out strict pass@1 "
        f"{s[split]['pass'].text(3)}"
        for split in (SOLO, SHARED)
    ]
    seeds = sorted(set(s[SOLO]["seeds"]) & set(s[SHARED]["seeds"]))
    never = "; ".join(
        f"{split}: {s[split]['never'][0]} of {s[split]['never'][1]} node-runs"
        for split in (SOLO, SHARED)
    )
    return (
        f"Aha speed-up: unhinted nodes under {'; under '.join(parts)}. {len(seeds)} seed(s) "
        f"paired in both ({SOLO}: {len(s[SOLO]['seeds'])}, {SHARED}: {len(s[SHARED]['seeds'])}). "
        f"Never half tagged, counted as round {s[SOLO]['run'] + 1}: {never}. Rounds: t-interval "
        "over seeds cut to the rounds run; pass@1: logit interval over seeds, inside [0, 1]."
    )


def spread(cells: list[dict]) -> dict | None:
    """4/4 against 4/4+alone with the hinted node stopped: each arm's unhinted held-out strict
    pass@1 over seeds, and sharing minus alone paired by seed."""
    splits = _by_split(cells)
    if not (SHARED in splits and ALONE in splits):
        return None
    arms = {s: {seed: unhinted_counts(c) for seed, c in splits[s].items()} for s in (SHARED, ALONE)}
    diffs, iv = paired(
        {seed: k / n for seed, (k, n) in arms[SHARED].items()},
        {seed: k / n for seed, (k, n) in arms[ALONE].items()},
    )
    any_cell = next(iter(splits[SHARED].values()))
    return {
        "shared": proportion_interval(list(arms[SHARED].values())),
        "alone": proportion_interval(list(arms[ALONE].values())),
        "diffs": diffs,
        "difference": iv,
        "hint_rounds": any_cell["config"].get("hint_rounds", 0),
        "rounds": max(len(v) for v in any_cell["tagged_share"].values()),
    }


def spread_line(s: dict) -> str:
    d = s["difference"]
    diff = "no seed in both arms" if d is None else _t(d, 3)
    per = ", ".join(f"{seed}: {x:+.3f}" for seed, x in s["diffs"].items())
    return (
        f"Second-order spread: unhinted nodes' held-out strict pass@1 after round "
        f"{s['rounds']} (node 0 stopped after round {s['hint_rounds']}): sharing ({SHARED}) "
        f"{s['shared'].text(3)}; alone ({ALONE}) {s['alone'].text(3)}; sharing - alone {diff} "
        f"(per seed {per or '-'}); {len(s['diffs'])} seed(s) paired. Each arm: logit interval "
        "over seeds, inside [0, 1]; the difference: t-interval over the paired seeds."
    )


def _t(iv: Interval | None, digits: int) -> str:
    if iv is None:
        return "-"
    if iv.low is None:
        return f"{iv.mean:.{digits}f} [one seed]"
    return f"{iv.mean:.{digits}f} [{iv.low:.{digits}f}, {iv.high:.{digits}f}]"


def after_stop_table(cells: list[dict]) -> list[str]:
    """Per unhinted node of each cell whose hinted node stopped after H rounds: its share of
    tagged answers in round H, its best strict reward in a round of 1-H, the groups it trained
    from the hinted node and from the others after H, its tagged share in the last round, its
    strict reward per round over the last 8 rounds, and its held-out strict pass@1."""
    rows = []
    for c in sorted(cells, key=lambda c: (c["split"], c.get("seed") or 0)):
        h = c.get("config", {}).get("hint_rounds") or 0
        if c["split"] == "base" or not h or "tagged_share" not in c:
            continue
        hinted, unhinted = _roles(c)
        ids = {c["node_ids"][n] for n in hinted}
        for n in unhinted:
            tagged, strict = c["tagged_share"][n], c["strict_reward"][n]
            after = c["external_from"][n][h:]
            mine = sum(k for rnd in after for p, k in rnd.items() if p in ids)
            others = sum(k for rnd in after for p, k in rnd.items() if p not in ids)
            last = [x or 0.0 for x in strict[-8:]]
            rows.append(
                f"| {c['split']} | {c['seed']} | {n} | {tagged[h - 1]:.2f} | "
                f"{max((x or 0.0) for x in strict[:h]):.3f} | {mine} | {others} | "
                f"{tagged[-1]:.2f} | {statistics.fmean(last):.3f} | "
                f"{statistics.fmean(c['heldout']['per_node'][n]['scores']):.3f} |"
            )
    if not rows:
        return []
    return [
        "",
        "After the hinted node stopped (round H = its last): per unhinted node, its tagged share "
        "in round H, its best strict reward in a round of 1-H, the groups it trained from the "
        "hinted node and from the others after H, its tagged share in the last round, its strict "
        "reward per round over the last 8 rounds, and its held-out strict pass@1:",
        "",
        "| split | seed | node | tagged, round H | best strict, rounds 1-H | from hinted after H | "
        "from others after H | tagged, last round | strict per round, last 8 | held-out |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
