"""Aha moments: a peer's completion that this node's verifier rewarded, for a question in a
domain where every one of this node's own completions that round scored 0 (or, when this node
drew the very same question, where its own completions of it all scored 0)."""

from __future__ import annotations

from ..data.tasks import TaskRef
from .sampling import ScoredGroup


def best(g: ScoredGroup) -> int:
    """The index of a group's best-rewarded completion (the first on ties)."""
    return max(range(len(g.rewards)), key=lambda i: g.rewards[i])


def failures(own: list[ScoredGroup]) -> tuple[dict[TaskRef, bool], set[str]]:
    """This round's own questions (ref -> all its completions scored 0) and the domains where
    every own completion scored 0: where a peer's right answer is an Aha."""
    by_domain: dict[str, list[float]] = {}
    for g in own:
        by_domain.setdefault(g.task_ref.dataset, []).extend(g.rewards)
    failed_domains = {d for d, rs in by_domain.items() if all(r <= 0 for r in rs)}
    return {g.task_ref: all(r <= 0 for r in g.rewards) for g in own}, failed_domains


def failed_here(ref: TaskRef, questions: dict[TaskRef, bool], domains: set[str]) -> bool:
    """Did this node fail this question (when it drew it) or else its domain, this round?"""
    return questions[ref] if ref in questions else ref.dataset in domains


def aha_flags(own: list[ScoredGroup], external: list[ScoredGroup]) -> list[bool]:
    """For each external group: is its best completion an Aha for this node?"""
    questions, domains = failures(own)
    return [
        g.rewards[best(g)] > 0 and failed_here(g.task_ref, questions, domains) for g in external
    ]
