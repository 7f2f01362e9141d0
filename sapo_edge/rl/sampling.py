"""The SAPO I/J mix: which own groups to publish (SelectSubset), I own groups (SampleSelf) and
J external groups re-scored by this node's verifier (SampleExternal, via pool.py's ExternalPool).

The pool's state (groups waiting, ids seen, counters) goes into checkpoints, and a round that is
stopped before its training step gives back the groups it took, so a resumed run uses the same.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sapo_edge.backends.base import Completion

from ..data.rollout import RolloutGroup
from ..data.tasks import TaskRef
from .advantages import group_advantages, is_informative

SUBSET_POLICIES = ("all", "informative", "none")
PREFER_TRIES = 4  # preferred groups re-scored at most per preferred slot (targeted sampling)


@dataclass
class ScoredGroup:
    """A group ready for training; rewards come from THIS node's verifier."""

    group_id: str
    task_ref: TaskRef
    question: str
    completions: list[str]
    rewards: list[float]
    origin: str  # "self" or the producer's node id
    advantages: list[float]
    # the completions as they are trained (ids, end token); completions[i] == tokens[i].text
    tokens: list[Completion] | None = None


def scored(
    group_id: str,
    task_ref: TaskRef,
    question: str,
    completions: list[str],
    rewards: list[float],
    origin: str,
    scale: bool = True,
    tokens: list[Completion] | None = None,
) -> ScoredGroup:
    """Build a ScoredGroup and fill its group-relative advantages (scale=False: Dr. GRPO).
    With tokens, each completion's text must be its tokens' text: the reward belongs to them."""
    if len(completions) != len(rewards):
        raise ValueError(
            f"got {len(completions)} completions but {len(rewards)} rewards; score every completion once."
        )
    if tokens is not None and [c.text for c in tokens] != list(completions):
        raise ValueError(
            "the texts scored are not the texts of the tokens to train; score Completion.text."
        )
    rs = [float(r) for r in rewards]
    return ScoredGroup(
        group_id,
        task_ref,
        question,
        list(completions),
        rs,
        origin,
        group_advantages(rs, scale=scale),
        None if tokens is None else list(tokens),
    )


def select_subset(
    groups: list[RolloutGroup], policy: str, max_count: int, rng: random.Random
) -> list[RolloutGroup]:
    """SelectSubset: this round's own groups to publish. policy "all" | "informative" | "none";
    max_count 0 means no cap, otherwise a uniform random subset of at most that size (order kept).
    """
    if policy not in SUBSET_POLICIES:
        raise ValueError(
            f"unknown share policy {policy!r}; use one of {', '.join(SUBSET_POLICIES)}."
        )
    if max_count < 0:
        raise ValueError(f"max_count is {max_count}; use 0 for no cap or a positive number.")
    if policy == "none":
        return []
    chosen = [g for g in groups if policy == "all" or is_informative(g.rewards)]
    if max_count and len(chosen) > max_count:
        keep = sorted(rng.sample(range(len(chosen)), max_count))
        chosen = [chosen[i] for i in keep]
    return chosen


def sample_self(groups: list[ScoredGroup], count: int, rng: random.Random) -> list[ScoredGroup]:
    """SampleSelf: drop zero-advantage groups, then draw up to `count` uniformly without replacement."""
    if count < 0:
        raise ValueError(f"count is {count}; ask for zero or more groups.")
    eligible = [g for g in groups if is_informative(g.rewards)]
    return rng.sample(eligible, min(count, len(eligible)))
