"""A class member's side of the class view: after every round, its figures (reward, groups
shared and trained, who it learned from, Aha moments) are signed and published to the room.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ..aha import aha_flags
from ..swarm.peerbook import is_node_id
from ..swarm.stats import MAX_PRODUCERS, MAX_REWARD, ROUNDS_PER_MESSAGE, RoundStats
from ..textsafe import clean


def _printable(text: Any, limit: int) -> str:
    return "".join(c for c in clean(text) if c.isprintable())[:limit]


def round_stats(report: Any, groups: Any, node: Any, role: str = "member") -> RoundStats:
    """One round's figures from the trainer's report and the groups behind it.

    learned: per producer, the groups of theirs this node trained on, and of those the ones its
    own verifier rewarded (any completion with a positive reward after re-scoring here)."""
    learned: dict[str, tuple[int, int]] = {}
    for g in groups.external:
        if is_node_id(g.origin):
            trained, rewarded = learned.get(g.origin, (0, 0))
            learned[g.origin] = (trained + 1, rewarded + int(max(g.rewards, default=0) > 0))
    if len(learned) > MAX_PRODUCERS:  # keep the producers it learned most from
        top = sorted(learned, key=lambda k: (-learned[k][0], k))[:MAX_PRODUCERS]
        learned = {k: learned[k] for k in top}
    backend = node.backend
    return RoundStats(
        round=report.round,
        reward=min(max(float(report.reward_mean), 0.0), MAX_REWARD),
        shared=report.published,
        trained_local=report.local_used,
        trained_external=max(report.external_used, sum(t for t, _ in learned.values())),
        aha=sum(aha_flags(groups.own, groups.external)),
        learned=learned,
        name=_printable(node.name, 40),
        model=_printable(node.model_id, 120),
        backend=_printable(getattr(backend, "name", type(backend).__name__), 40),
        device=_printable(getattr(backend, "device", "?"), 40),
        role=role,
    )


class ClassMember:
    """A trainer Callback wrapper: passes everything on to `inner` and, after each round,
    publishes this node's recent figures to the room (`publish`, e.g.
    NetworkTransport.publish_stats; the last few rounds, so one sent while offline still
    arrives) and hands the round's to `local` (the host's own board). `first_link`, when given,
    is called once before the first round: it waits (bounded) until the class is reachable."""

    def __init__(
        self,
        inner: Any,
        publish: Callable[[list[RoundStats]], None] | None,
        *,
        role: str = "member",
        local: Callable[[str, RoundStats], None] | None = None,
        first_link: Callable[[], Any] | None = None,
        log: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.inner, self.publish, self.role, self.local, self.log = inner, publish, role, local, log
        self.first_link = first_link
        self.node: Any = None
        self.recent: deque[RoundStats] = deque(maxlen=ROUNDS_PER_MESSAGE)

    def on_phase(self, node: Any, phase: str) -> None:
        self.node = node
        if self.first_link is not None:
            wait, self.first_link = self.first_link, None
            wait()
        on_phase = getattr(self.inner, "on_phase", None)
        if on_phase is not None:
            on_phase(node, phase)

    def on_progress(self, node: Any, phase: str, done: int, total: int, tokens: int) -> None:
        on_progress = getattr(self.inner, "on_progress", None)
        if on_progress is not None:
            on_progress(node, phase, done, total, tokens)

    def on_message(self, node: str, text: str) -> None:
        self.inner.on_message(node, text)

    def on_round(self, report: Any) -> None:
        node = self.node
        if node is not None:
            try:
                stats = round_stats(report, node.last_groups, node, self.role)
                self.recent.append(stats)
                if self.publish is not None:
                    self.publish(list(self.recent))
                if self.local is not None:
                    self.local(node.node_id, stats)
            except (ValueError, OSError) as e:  # the class view misses a round; training goes on
                self.log(f"class stats not sent for round {report.round + 1}: {e}")
        self.inner.on_round(report)
