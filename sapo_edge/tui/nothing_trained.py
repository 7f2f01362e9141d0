"""Why a round trained on nothing, and what to change: read from the round's own scored groups
(plain Python, no Textual; the bridge sends the result to the dashboard)."""

from __future__ import annotations

from typing import Any

from ..rl.rewards import extract_tagged

RESTART = "quit (q) and run the command printed on exit with"


def why_nothing_trained(
    report: Any, own: list[Any], cfg: Any, earlier_best: float = 0.0
) -> tuple[str, str] | None:
    """(why, fix) when the round's train step had no group to learn from, else None.

    A group teaches only when its completions scored differently (non-zero advantage); own
    groups count when I > 0, peer groups when J > 0 and some arrived. `earlier_best`: the best
    mean reward of this run's earlier rounds (a run that has earned rewards is not told its
    questions are too hard after one round of wrong answers).
    """
    if report.local_used + report.external_used > 0:
        return None
    # the round's own I and J (the trainer's report; the adaptive mix chooses them each round)
    i, j = report.local_target, report.external_target
    peers = _peers_note(report, j)
    if i == 0:
        return (
            f"I=0: this node trains only on peer groups, and {peers}.",
            "Raise I in the settings (c) to learn from this node's own answers.",
        )
    why, fix = _own_groups(own, cfg, earlier_best)
    if j > 0:
        why += f"; {peers}"
    return why + ".", fix


def _peers_note(report: Any, j: int) -> str:
    if j == 0:
        return "J=0"
    if not report.received and not report.pool.get("size", 0):
        return "no peer groups have arrived"
    return "no peer group was usable (each scored alike here too, or was stale or rejected)"


def _own_groups(own: list[Any], cfg: Any, earlier_best: float = 0.0) -> tuple[str, str]:
    rewards = [r for g in own for r in g.rewards]
    n = len(own)
    if not rewards:
        return "this round produced no groups", "Check --questions-per-round and --group-size."
    low, high = min(rewards), max(rewards)
    alike = f"all {n} groups scored alike (reward {low:g})" if low == high else ""
    if high <= 0 and earlier_best > 0:
        return (
            f"{alike}: every answer was wrong this round, after rounds whose mean reward "
            f"reached {earlier_best:.2f}",
            "Nothing to change: a round of questions this model got all wrong happens (its "
            "questions are drawn at random); the next rounds go on learning from the earlier ones.",
        )
    if high <= 0:
        tagged = sum(extract_tagged(c) is not None for g in own for c in g.completions)
        if tagged == 0 and not cfg.lenient:
            return (
                f"{alike}: the model never wrote <answer> tags, so every answer scored 0",
                f"A small model often needs lenient scoring: {RESTART} --lenient "
                "(a right last number earns half credit), or use a bigger --model.",
            )
        return (
            f"{alike}: every answer was wrong",
            "The questions are too hard for this model: "
            f"{RESTART} easier --domain-configs (e.g. one-digit addition) or fewer --domains, "
            f"a larger --max-new-tokens (now {cfg.max_new_tokens}) if answers are cut off, "
            "or use a bigger --model.",
        )
    if low == high:
        return (
            f"{alike}: every completion earned the same reward, nothing to tell apart",
            f"{RESTART} harder --domain-configs or more --domains, or a larger --group-size "
            f"(now {cfg.group_size}) for more varied answers.",
        )
    return (
        f"each of the {n} groups scored alike inside itself (rewards {low:g} to {high:g})",
        f"More varied answers per question: {RESTART} a larger --group-size "
        f"(now {cfg.group_size}) or --temperature (now {cfg.temperature:g}).",
    )
