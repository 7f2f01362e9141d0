"""What the adaptive mix's choice of J can and cannot tell within a run (docs/results.md): the
bandit (sapo_edge/rl/mix.py) in simulated worlds of a node's own reward, many seeds each.

    .venv/bin/python bench/mix_worlds.py [--seeds 400] [--rounds 48] [--noise 0.098]

A world: the node's expected own reward starts at 0.3 and moves each round by the world's
progress, plus `gap` when the step trained the best J (4); a round's 8 groups are that level plus
noise, so the round's mean reward has standard error `noise` (0.098 is the sd of a round's mean own
reward at 8 questions x 4 completions, from the v4 runs). Worlds:
- `gap`: progress 0.01 a round, J=4 better by `gap`: how often is J=4 played in rounds 17-48?
- `null`: progress 0.01, no J matters: how often does play settle (one J in >= half of rounds
  17-48), and on how many different J do seeds settle?
- `flattening`: progress 0.03 falling to 0 (halving every 8 rounds), no J matters: is the J
  tried first favoured in rounds 17-48 (its share against the others')?
Pure Python, a few seconds per world; deterministic for a seed count.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sapo_edge.rl.mix import ARMS, AdaptiveMix  # noqa: E402


def play(seed: int, rounds: int, noise: float, progress, gap: float = 0.0, best: int = 4):
    """The J chosen each round, and the J the mix tried first."""
    rng = random.Random(10_000 + seed)
    mix = AdaptiveMix(seed=seed)
    first = mix.order[0]
    level, chosen = 0.3, []
    for r in range(rounds):
        groups = [level + rng.gauss(0, noise * 8**0.5) for _ in range(8)]
        j = mix.choose(groups, 8, 8)
        mix.trained(j)
        chosen.append(j)
        level += progress(r) + (gap if j == best else 0.0)
    return chosen, first


def study(seeds: int, rounds: int, noise: float, gap: float) -> dict:
    late = slice(16, rounds)
    out: dict = {"seeds": seeds, "rounds": rounds, "noise": noise}
    runs = [play(s, rounds, noise, lambda r: 0.01, gap)[0][late] for s in range(seeds)]
    out["gap"] = {
        "gap": gap,
        "best_share": round(statistics.fmean(j == 4 for p in runs for j in p), 3),
        "seeds_mostly_best": round(statistics.fmean(p.count(4) >= len(p) / 2 for p in runs), 3),
    }
    runs = [play(s, rounds, noise, lambda r: 0.01)[0][late] for s in range(seeds)]
    settled = [max(ARMS, key=p.count) for p in runs if max(p.count(a) for a in ARMS) >= len(p) / 2]
    out["null"] = {
        "settled_share": round(len(settled) / seeds, 3),
        "settled_on": {a: settled.count(a) for a in ARMS},
    }
    first_share, other_share = [], []
    for s in range(seeds):
        chosen, first = play(s, rounds, noise, lambda r: 0.03 * 0.5 ** (r / 8))
        p = chosen[late]
        first_share.append(p.count(first) / len(p))
        other_share.append(statistics.fmean(p.count(a) / len(p) for a in ARMS if a != first))
    out["flattening"] = {
        "first_tried_share": round(statistics.fmean(first_share), 3),
        "other_share": round(statistics.fmean(other_share), 3),
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=48)
    ap.add_argument("--noise", type=float, default=0.098)
    ap.add_argument("--gap", type=float, default=0.05)
    a = ap.parse_args()
    print(json.dumps(study(a.seeds, a.rounds, a.noise, a.gap), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
