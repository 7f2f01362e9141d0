"""Adaptive I/J (`mix = "adaptive"`): each node picks J, the peer groups it trains on, every
round, from what it observes; I = local_samples + external_samples - J keeps the step's size.

The choice is a discounted UCB bandit (Garivier & Moulines 2008) over J in ARMS = {0, 2, 4, 6}.
Its reward is the node's own learning progress: the step of round t (trained on I_t own + J_t
peer groups) changes the policy that answers round t+1's questions, so J_t is credited with

    progress_t = own mean reward at round t+1 - own mean reward at round t

measured on the node's own fresh questions, the same quantity whose sum is the cumulative reward
the experiment compares. Why this signal and not an immediate one (the share of re-scored peer
groups that are informative, or the reward of the groups trained on): those count how well the
training slots are filled, not whether the node learns; they rise with J whenever peers publish
enough, so a bandit on them drifts to J = 6, the split the paper found to oscillate and forget.
Progress is noisy (a round mean of 8 x 4 completions has a standard error near 0.07), so the
bandit forgets old evidence slowly (DISCOUNT 0.9, about 10 rounds of memory: the value of peers'
groups changes as the nodes diverge) and explores with a bonus of the same size as that noise.

Deterministic given the node seed (the order in which untried arms are tried, and so every tie,
comes from it) and saved in checkpoints: state_dict() is plain JSON, restored exactly.
"""

from __future__ import annotations

import math
import random

ARMS = (0, 2, 4, 6)  # J: peer groups trained on per round
DISCOUNT = 0.9  # each update multiplies every arm's evidence by this
EXPLORATION = 0.1  # the UCB bonus's scale, in reward units (a round mean's noise)
MIXES = ("fixed", "adaptive")


def feasible_arms(budget: int, questions_per_round: int) -> list[int]:
    """The J a node can take: J <= I + J budget, and I = budget - J <= its own groups a round."""
    return [j for j in ARMS if j <= budget and budget - j <= questions_per_round]


class AdaptiveMix:
    """Discounted UCB over J. Call choose() once a round, after scoring the round's own groups."""

    def __init__(self, seed: int):
        order = list(ARMS)
        random.Random(seed).shuffle(order)  # nodes usually try different J first
        self.order = order
        self.weight = dict.fromkeys(ARMS, 0.0)  # discounted count of plays
        self.total = dict.fromkeys(ARMS, 0.0)  # discounted sum of progress
        self.pending: tuple[int, float] | None = None  # (J of the last step, own reward then)
        self.last_progress: float | None = None  # credited by the latest choose()

    def choose(self, own_reward: float, budget: int, questions_per_round: int) -> int:
        """Credit the previous round's J with the progress own_reward shows, then pick this
        round's J among the feasible arms."""
        self.last_progress = None
        if self.pending is not None:
            j, before = self.pending
            self.last_progress = own_reward - before
            self._update(j, self.last_progress)
        arms = [j for j in self.order if j in feasible_arms(budget, questions_per_round)]
        if not arms:
            raise ValueError(
                f"no J in {ARMS} fits local_samples + external_samples = {budget} with "
                f"questions_per_round = {questions_per_round}: raise questions_per_round."
            )
        j = max(arms, key=lambda a: (self.score(a), -self.order.index(a)))
        self.pending = (j, own_reward)
        return j

    def _update(self, arm: int, progress: float) -> None:
        for a in ARMS:
            self.weight[a] *= DISCOUNT
            self.total[a] *= DISCOUNT
        self.weight[arm] += 1.0
        self.total[arm] += progress

    def mean(self, arm: int) -> float | None:
        return self.total[arm] / self.weight[arm] if self.weight[arm] > 0 else None

    def score(self, arm: int) -> float:
        """Upper confidence bound: discounted mean + EXPLORATION * sqrt(ln N / n); untried: inf."""
        n = self.weight[arm]
        if n == 0:
            return math.inf
        big_n = max(sum(self.weight.values()), 1.0)
        return self.total[arm] / n + EXPLORATION * math.sqrt(math.log(big_n) / n)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {
            "version": 1,
            "order": list(self.order),
            "weight": [self.weight[a] for a in ARMS],
            "total": [self.total[a] for a in ARMS],
            "pending": None if self.pending is None else list(self.pending),
            "last_progress": self.last_progress,
        }

    def load_state_dict(self, d: dict) -> None:
        if not isinstance(d, dict) or d.get("version") != 1 or sorted(d["order"]) != list(ARMS):
            raise ValueError("the adaptive mix's saved state is not one this version can read.")
        self.order = [int(a) for a in d["order"]]
        self.weight = {a: float(w) for a, w in zip(ARMS, d["weight"], strict=True)}
        self.total = {a: float(t) for a, t in zip(ARMS, d["total"], strict=True)}
        p = d["pending"]
        self.pending = None if p is None else (int(p[0]), float(p[1]))
        lp = d.get("last_progress")
        self.last_progress = None if lp is None else float(lp)
