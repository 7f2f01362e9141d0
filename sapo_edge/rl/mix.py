"""Adaptive I/J (`mix = "adaptive"`): each node picks J, the peer groups it trains on, from what
it observes; I = local_samples + external_samples - J keeps the step's size.

What is credited. A step changes the policy for every later round, so the effect of J is the
*progress* of the node's own mean reward while it trains with that J (the per-round gap between
splits grows with training, docs/results.md). J is held for a block of BLOCK rounds and the
block is credited, per round, with

    progress = (own reward at the block's end - own reward at its start) / rounds in the block

on the node's own fresh questions (the same quantity whose sum is the cumulative reward the
experiment compares). Credit goes to the J the block *trained*, not the J it asked for: the
trainer reports every step's J (trained()), tops up with own groups when peers fall short, and a
block whose steps did not all train the same J in ARMS is credited to no arm (counted as
`uncredited`). Only J the pool can fill are offered (feasible_arms' `available`: a node without
peers is offered J = 0 alone), and a J the pool fell short of waits PAUSE rounds.

Why it is unbiased. The old credit R(t+1) - R(t) put one round's noise into two consecutive
credits with opposite signs, and the choice between them depended on it: a lucky round credited
the arm that led to it, so that arm was kept, and the kept arm's next credit started from the
lucky value (a kept arm averaged -0.046, a switched-to arm +0.028, in a world where J does
nothing). Here the round that closes one block and opens the next is split at random (the
bandit's own seeded rng, never the rewards) into two halves of its groups: one half ends the old
block, the other starts the new one. Every choice depends only on halves already used as *ends*,
and every later credit only on halves never seen by a choice (the *start* halves and later
rounds), so with noise independent between groups each credit's expectation is the arm's true
progress whatever was chosen before. The price: a half has twice a round's variance.

Why it learns. The noise of a round's mean reward (8 x 4 completions) is 0.07-0.10 (v4's runs:
0.098), so a one-round difference cannot tell +0.05 apart. Each node measures its own: every
round's standard error (the spread of its groups' mean rewards over the square root of their
number), recent rounds weighing more (the spread shrinks as rewards near 0 or 1), starting from
the NOISE prior, which fades like an old round's estimate; the posterior's spread scales with it. A block of 4 divides the noise of the per-round
progress by 4 (the end and start are 4 rounds apart: the effect adds up, the noise does not).
The choice is Thompson sampling (a draw from each arm's Gaussian posterior, the largest wins)
with the posterior's spread tempered by TEMPER = 0.5, after trying every arm once in a seeded
order; evidence is discounted by DISCOUNT per credited block (about 20 blocks of memory: the
value of peers' groups changes as nodes diverge). In the simulated worlds of tests/test_mix.py
it picks an arm better by +0.05 per round in 83% of rounds 40-59 (the old bandit: 37%), and
where no arm matters every arm's mean credit is the true progress to within 0.003 (the old
bandit: -0.048 for a kept arm, +0.027 for a switched-to one).

Limits. The credit measures what a J adds to the *rate* of learning; a J whose effect were a
one-off shift of the next round's reward would be credited at the block that switches to it
and debited at the one that leaves it. Progress slows as rewards saturate, so an arm tried in a
steep phase looks better than one tried later: the discount fades that, and the seeded order
spreads first tries over nodes. With one own group a round both halves are that group.

What the choice can and cannot tell within 48 rounds (bench/mix_worlds.py, 300 simulated nodes
per world, a round's noise 0.098, rounds 17-48): where one J adds +0.05 reward per round per
round, it is played in 60% of rounds and on 72% of nodes in most of them; where no J matters,
87% of nodes still settle on one J (in half the rounds or more), spread evenly over the four,
and the J tried first is favoured a little when progress flattens (27% against 24%). So a node
settling on a J says little by itself: only a J that many nodes of many seeds settle on, well
above a quarter of them, is evidence that it helps.

Deterministic given the node seed and saved in checkpoints: state_dict() is plain JSON.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

ARMS = (0, 2, 4, 6)  # J: peer groups trained on per round
BLOCK = 4  # rounds a chosen J is held before it is credited
DISCOUNT = 0.95  # each credited block multiplies every arm's evidence by this
NOISE = 0.07  # a round's own mean reward's standard error before any round is seen (the prior)
NOISE_PRIOR_ROUNDS = 4  # the prior weighs as much as this many rounds' own estimates
NOISE_MEMORY = 0.9  # each round multiplies the weight of the earlier rounds' estimates by this
TEMPER = 0.5  # the posterior draw's spread, as a share of the posterior's own
PAUSE = 2 * BLOCK  # rounds a J the pool fell short of is not offered (while others are)
STATE_VERSION = 2
Available = int | Callable[[int], int] | None


def feasible_arms(
    budget: int, questions_per_round: int, available: Available = None, min_local: int = 0
) -> list[int]:
    """The J a node can take: J <= I + J budget, I = budget - J <= its own groups a round and at
    least min_local, and J <= available (the peer groups waiting, or a function of J giving how
    many of J the pool could fill; None: no limit)."""
    return [
        j
        for j in ARMS
        if j <= budget
        and min_local <= budget - j <= questions_per_round
        and (available is None or j <= (available(j) if callable(available) else available))
    ]


class AdaptiveMix:
    """Blocks of BLOCK rounds with one J each, credited with the progress they showed.

    Each round: choose(group_rewards, ...) after scoring the round's own groups (the mean reward
    of each own group), then trained(j) with the J the step actually trained."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        order = list(ARMS)
        self.rng.shuffle(order)  # nodes usually try different J first
        self.order = order
        self.weight = dict.fromkeys(ARMS, 0.0)  # discounted precision (rounds^2) credited
        self.total = dict.fromkeys(ARMS, 0.0)  # discounted precision-weighted progress
        self.block: dict | None = None  # {"arm", "start", "trained": [J per step]}
        self.last_progress: float | None = None  # credited by the latest choose()
        self.last_credited: int | None = None  # ...to this arm
        self.uncredited = 0  # blocks whose steps did not train one J of ARMS
        self.paused: dict[int, int] = {}  # J -> rounds before it is offered again
        # the node's own noise: discounted sums of each round's squared standard error, from
        # the prior's pseudo-rounds (which fade like any earlier round's estimate)
        self.noise_sum, self.noise_rounds = NOISE_PRIOR_ROUNDS * NOISE**2, NOISE_PRIOR_ROUNDS

    def choose(
        self,
        group_rewards: list[float],
        budget: int,
        questions_per_round: int,
        available: Available = None,
        min_local: int = 0,
    ) -> int:
        """This round's J. group_rewards: the mean reward of each of this round's own groups
        (their order does not matter). Closes the running block when it is complete, when a
        step trained another J than it asked for, or when its J is no longer feasible."""
        if not group_rewards:
            raise ValueError("choose() needs this round's own group rewards (none given).")
        self.last_progress = self.last_credited = None
        self._observe_noise(group_rewards)
        allowed = feasible_arms(budget, questions_per_round, None, min_local)
        if not allowed:
            raise ValueError(
                f"no J in {ARMS} fits local_samples + external_samples = {budget} with "
                f"questions_per_round = {questions_per_round}: raise questions_per_round."
            )
        fits = feasible_arms(budget, questions_per_round, available, min_local) or [min(allowed)]
        self.paused = {j: n - 1 for j, n in self.paused.items() if n > 1}
        b = self.block
        if b is not None and not b.get("withheld") and not self._must_close(b, fits):
            return b["arm"]
        if b is None or not b["trained"] or b.get("withheld"):  # nothing to credit: the whole
            start = statistics.fmean(group_rewards)  # round starts the next block
        else:
            ends, starts = self._halves(group_rewards)
            self._credit(b, statistics.fmean(ends))
            start = statistics.fmean(starts)
        arm = self._pick([j for j in fits if j not in self.paused] or fits)
        # a J that was the only one the pool could fill ends as soon as others fit (the first
        # node of a swarm has no peer groups in its first round)
        only = len(fits) == 1 and len(allowed) > 1
        self.block = {"arm": arm, "start": start, "trained": [], "only": only, "withheld": False}
        return arm

    def trained(self, j: int) -> None:
        """The J the step of this round trained (external groups actually used)."""
        if self.block is not None:
            self.block["trained"].append(int(j))

    def withheld(self) -> None:
        """This round's step was held back whatever J was asked (rl/peers_alone.py): the block
        ends at the next choice, neither credited (its J was not what decided the round) nor
        its J paused (the pool did not fall short)."""
        if self.block is not None:
            self.block["withheld"] = True

    def _must_close(self, b: dict, arms: list[int]) -> bool:
        t = b["trained"]
        return (
            len(t) >= BLOCK
            or any(j != b["arm"] for j in t)
            or b["arm"] not in arms
            or (b.get("only", False) and len(arms) > 1)
        )

    def _halves(self, rewards: list[float]) -> tuple[list[float], list[float]]:
        """A random split of the round's groups (one group: the same group on both sides)."""
        if len(rewards) < 2:
            return list(rewards), list(rewards)
        idx = list(range(len(rewards)))
        self.rng.shuffle(idx)
        h = len(idx) // 2
        return [rewards[i] for i in idx[:h]], [rewards[i] for i in idx[h:]]

    def _credit(self, b: dict, end: float) -> None:
        trained = b["trained"]
        arm = trained[0]
        if any(j != b["arm"] for j in trained):  # the pool fell short of the J asked: offer it
            self.paused[b["arm"]] = PAUSE  # again later, not at once (a cap or bad groups)
        if arm not in ARMS or any(j != arm for j in trained):
            self.uncredited += 1
            return
        k = len(trained)
        progress = (end - b["start"]) / k
        for a in ARMS:
            self.weight[a] *= DISCOUNT
            self.total[a] *= DISCOUNT
        self.weight[arm] += k * k  # the progress's variance is ~ 4 NOISE^2 / k^2
        self.total[arm] += k * k * progress
        self.last_progress, self.last_credited = progress, arm

    def _pick(self, arms: list[int]) -> int:
        untried = [a for a in self.order if a in arms and self.weight[a] == 0]
        if untried:
            return untried[0]
        draws = {a: self.mean(a) + TEMPER * self.spread(a) * self.rng.gauss(0, 1) for a in arms}
        return max(arms, key=lambda a: (draws[a], -self.order.index(a)))

    def mean(self, arm: int) -> float | None:
        """The arm's discounted mean progress per round (None: never credited)."""
        return self.total[arm] / self.weight[arm] if self.weight[arm] > 0 else None

    def spread(self, arm: int) -> float:
        """The posterior standard deviation of the arm's progress per round."""
        w = self.weight[arm]
        return math.inf if w == 0 else 2 * self.noise() / math.sqrt(w)

    def _observe_noise(self, group_rewards: list[float]) -> None:
        """Fold this round's standard error of its mean own reward (the spread of its groups'
        mean rewards over the square root of their number) into the node's noise estimate."""
        if len(group_rewards) < 2:
            return
        se2 = statistics.variance(group_rewards) / len(group_rewards)
        self.noise_sum = NOISE_MEMORY * self.noise_sum + se2
        self.noise_rounds = NOISE_MEMORY * self.noise_rounds + 1

    def noise(self) -> float:
        """The standard error of a round's mean own reward: the node's own rounds (recent ones
        weigh more: the spread shrinks as rewards near 0 or 1), the NOISE prior fading with
        them."""
        return math.sqrt(self.noise_sum / self.noise_rounds)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {
            "version": STATE_VERSION,
            "order": list(self.order),
            "weight": [self.weight[a] for a in ARMS],
            "total": [self.total[a] for a in ARMS],
            "block": None
            if self.block is None
            else {**self.block, "trained": list(self.block["trained"])},
            "last_progress": self.last_progress,
            "last_credited": self.last_credited,
            "uncredited": self.uncredited,
            "paused": [[j, n] for j, n in sorted(self.paused.items())],
            "noise": [self.noise_sum, self.noise_rounds],
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, d: dict) -> None:
        if (
            not isinstance(d, dict)
            or d.get("version") != STATE_VERSION
            or sorted(d.get("order", [])) != list(ARMS)
        ):
            raise ValueError("the adaptive mix's saved state is not one this version can read.")
        self.order = [int(a) for a in d["order"]]
        self.weight = {a: float(w) for a, w in zip(ARMS, d["weight"], strict=True)}
        self.total = {a: float(t) for a, t in zip(ARMS, d["total"], strict=True)}
        b = d["block"]
        self.block = (
            None
            if b is None
            else {
                "arm": int(b["arm"]),
                "start": float(b["start"]),
                "trained": [int(j) for j in b["trained"]],
                "only": bool(b.get("only", False)),
                "withheld": bool(b.get("withheld", False)),
            }
        )
        lp, lc = d.get("last_progress"), d.get("last_credited")
        self.last_progress = None if lp is None else float(lp)
        self.last_credited = None if lc is None else int(lc)
        self.uncredited = int(d.get("uncredited", 0))
        self.paused = {int(j): int(n) for j, n in d.get("paused", [])}
        prior = (NOISE_PRIOR_ROUNDS * NOISE**2, NOISE_PRIOR_ROUNDS)
        self.noise_sum, self.noise_rounds = (float(x) for x in d.get("noise", prior))
        version, internal, gauss = d["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
