"""Aha moments: a peer's completion that this node's verifier rewarded, for a question in a
domain where every one of this node's own completions that round scored 0 (or, when this node
drew the very same question, where its own completions of it all scored 0)."""

from __future__ import annotations

from .sampling import ScoredGroup


def best(g: ScoredGroup) -> int:
    """The index of a group's best-rewarded completion (the first on ties)."""
    return max(range(len(g.rewards)), key=lambda i: g.rewards[i])


def aha_flags(own: list[ScoredGroup], external: list[ScoredGroup]) -> list[bool]:
    """For each external group: is its best completion an Aha for this node?"""
    by_domain: dict[str, list[float]] = {}
    for g in own:
        by_domain.setdefault(g.task_ref.dataset, []).extend(g.rewards)
    failed_domains = {d for d, rs in by_domain.items() if all(r <= 0 for r in rs)}
    own_by_ref = {g.task_ref: g for g in own}
    flags = []
    for g in external:
        same = own_by_ref.get(g.task_ref)
        failed = (
            all(r <= 0 for r in same.rewards)
            if same is not None
            else g.task_ref.dataset in failed_domains
        )
        flags.append(g.rewards[best(g)] > 0 and failed)
    return flags
