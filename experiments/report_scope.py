"""What each experiment set out to test (issue 56): the goals docs/results.md checks for it, and
what its baseline is and is not. A goal line appears only under the experiments its goal was
set for; an experiment not named here gets no goal line and says that its baseline is not
described yet.

- CUMULATIVE: the swarm's cumulative reward >= 1.5x 8/0's with the paired interval excluding 1x
  (the evidence issues before 45: main, long; issue 32: v3, v4).
- LESSON: issue 32's fair target, >= 1.1x 8/0 over the first 12 rounds with the interval above
  1x and held-out pass@1 not below 8/0's (set after main ran; main, v3 and v4 were read by it).
- AHA: issue 45's, for `aha` alone: the unhinted nodes' held-out strict pass@1 under the best
  sharing split >= 2x and >= 0.15 above 8/0's, intervals apart, 3 seeds.
"""

from __future__ import annotations

CUMULATIVE, LESSON, AHA = "cumulative", "lesson", "aha"

GOALS: dict[str, frozenset[str]] = {
    "main": frozenset({CUMULATIVE, LESSON}),
    "long": frozenset({CUMULATIVE, LESSON}),
    "v3": frozenset({CUMULATIVE, LESSON}),
    "v4": frozenset({CUMULATIVE, LESSON}),
    "aha": frozenset({AHA}),
}

_SOLO = (
    "Baseline 8/0: the same nodes, seeds and questions, each training on its own groups and "
    "receiving none. "
)
BASELINES: dict[str, str] = {
    "main": _SOLO + "Here that is solo training on a task the model learns alone within a "
    "lesson (lenient scoring credits untagged answers); it is not a node lacking a skill its "
    "peers have, so sharing can only act as a bigger batch.",
    "v4": _SOLO + "Every node sees the worked example and lenient scoring credits untagged "
    "answers: no node knows anything the others do not, so sharing can only act as a bigger "
    "batch.",
    "aha": _SOLO + "For the unhinted nodes it is the base model: without the example they all "
    "but never tag an answer, so under strict scoring every group of their own scores 0 alike "
    "and they take no training step (counted below). It shows that sharing passes on a skill a "
    "node cannot find at all; it does not show that sharing speeds up a skill a node could "
    "learn alone (aha-speedup asks that).",
    "aha-stop8": "No baseline: node 0 stops after round 8 and the other three share with each "
    "other to round 24; nothing here says what they would have reached alone from round 9 "
    "(aha-spread's 4/4+alone is that control).",
    "aha-speedup": _SOLO + "Every node is told the format in its user turn, so an unhinted node "
    "alone tags a few of its answers and can learn the format by itself: 8/0 is solo learning "
    "of the format, not the base model (unlike aha's 8/0), and the comparison is how much "
    "sooner sharing gets the unhinted nodes there.",
    "aha-spread": "Baseline 4/4+alone: the same seeds, node 0 sharing its groups for 8 rounds "
    "in both arms; from round 9 each unhinted node trains alone instead of on the others' "
    "groups. Sharing minus alone at round 24 is what sharing among the unhinted nodes added "
    "after the source stopped; it is not the effect of node 0's 8 rounds, which both arms had.",
}
BASELINES["long"] = BASELINES["main"]
BASELINES["v3"] = BASELINES["main"]


def goals(label: str) -> frozenset[str]:
    return GOALS.get(label, frozenset())


def baseline(label: str) -> str:
    return BASELINES.get(label, "Baseline: not described for this experiment yet.")
