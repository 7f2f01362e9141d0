"""Targeted SampleExternal (`external_sampling = "targeted"`): prefer the peer groups that can
teach this node something, the paper's open problem ("more sophisticated sampling/filtering").

A peer group is *wanted*, most wanted first, when its question is
  0. one this node drew this round and failed (all its own completions scored 0),
  1. in a domain where every own completion this round scored 0 (aha.failures: the groups whose
     right answer would be an Aha),
  2. in a domain where the node's recent success (Success: a moving average of its own rewards,
     per domain) is below its average over the domains it has seen, the weakest first.
Only this node's own rewards and the group's task ref decide it, never the producer's claimed
rewards (hostile: a peer could claim a right answer to be picked). The ref is checked when the
group is re-scored (the regenerated question must be the one sent), and a wanted group is only
trained if this node's verifier finds its completions differ, which under the binary reward
means it holds a right answer and a wrong one.

Limits, so the node keeps learning from its own questions and the peers' whole distribution:
at most targeted_limit() of the round's J are picked for being wanted (a share of J, rounded
down, and never more than the own groups the step trains, unless it trains none: then the
share alone); the rest of J is the paper's uniform
draw, fresh groups first; at most PREFER_TRIES (4) wanted groups per wanted slot are re-scored
(a flood of useless groups in a weak domain costs bounded work; sampling.py). Nothing wanted: the draw is exactly the
uniform one (same groups, same random stream).
"""

from __future__ import annotations

import math
import statistics

from ..data.rollout import RolloutGroup
from .aha import failed_here, failures
from .sampling import ScoredGroup

RECENT = 0.3  # the weight of this round in a domain's moving success


class Success:
    """The node's recent success per domain: an exponential moving average of the mean reward
    of its own completions in that domain (this round's weight RECENT)."""

    def __init__(self) -> None:
        self.by_domain: dict[str, float] = {}

    def update(self, own: list[ScoredGroup]) -> None:
        rewards: dict[str, list[float]] = {}
        for g in own:
            rewards.setdefault(g.task_ref.dataset, []).extend(g.rewards)
        for d, rs in rewards.items():
            now = statistics.fmean(rs)
            old = self.by_domain.get(d)
            self.by_domain[d] = now if old is None else (1 - RECENT) * old + RECENT * now

    def state_dict(self) -> dict:
        return {"version": 1, "by_domain": dict(sorted(self.by_domain.items()))}

    def load_state_dict(self, d: dict) -> None:
        if not isinstance(d, dict) or d.get("version") != 1:
            raise ValueError("the saved domain success is not one this version can read.")
        self.by_domain = {str(k): float(v) for k, v in d["by_domain"].items()}


def wanted(own: list[ScoredGroup], success: Success):
    """The ranking of a peer group: a sort key (smaller: more wanted), or None when not wanted."""
    questions, domains = failures(own)
    seen = success.by_domain
    average = statistics.fmean(seen.values()) if seen else 0.0

    def rank(group: RolloutGroup) -> tuple[int, float] | None:
        ref = group.task_ref
        if failed_here(ref, questions, domains):
            return (0 if ref in questions else 1, 0.0)
        recent = seen.get(ref.dataset)
        if recent is not None and recent < average:
            return (2, recent)
        return None

    return rank


def targeted_limit(share: float, count: int, own_trained: int) -> int:
    """How many of a round's `count` external groups may be picked for being wanted: a share of
    them, and no more than the own groups the step trains, unless it trains none (the Aha case:
    every own group scored alike, so no own group is crowded out and the wanted ones are all
    the node can learn from)."""
    cap = own_trained if own_trained > 0 else count
    return max(0, min(math.floor(share * count), cap, count))
