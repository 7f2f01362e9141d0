"""A class member's side of the class view: after every round, its figures (reward, groups
shared and trained, who it learned from, Aha moments) are signed and published to the room; as
it goes, what it is doing (loading its model, generating 40% of round 3, training: its progress).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..data.textsafe import clean
from ..events import Forward
from ..rl.aha import aha_flags
from ..swarm.peerbook import is_node_id
from ..swarm.progress import Progress
from ..swarm.stats import MAX_PRODUCERS, MAX_REWARD, ROUNDS_PER_MESSAGE, RoundStats

if TYPE_CHECKING:
    from ..rl.trainer import Node


def printable(text: Any, limit: int) -> str:
    return "".join(c for c in clean(text) if c.isprintable())[:limit]


def round_stats(report: Any, groups: Any, node: Node, role: str = "member") -> RoundStats:
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
    return RoundStats(
        round=report.round,
        reward=min(max(float(report.reward_mean), 0.0), MAX_REWARD),
        shared=report.published,
        trained_local=report.local_used,
        trained_external=max(report.external_used, sum(t for t, _ in learned.values())),
        aha=sum(aha_flags(groups.own, groups.external)),
        learned=learned,
        **node_claims(node),
        role=role,
        tagged=_fraction(report.tagged_share),
        strict=_fraction(report.strict_reward),
    )


def _fraction(v: Any) -> float | None:
    return None if v is None else min(max(float(v), 0.0), 1.0)


def node_claims(node: Node) -> dict[str, str]:
    """The name, model, backend and device a node announces with its figures and progress."""
    backend = node.backend
    return dict(
        name=printable(node.name, 40),
        model=printable(node.model_id, 120),
        backend=printable(backend.name, 40),
        device=printable(backend.device, 40),
    )


class ClassMember(Forward):
    """A trainer Callback wrapper: passes everything on to `inner` and, after each round,
    publishes this node's recent figures to the room (`publish`, e.g.
    NetworkTransport.publish_stats; the last few rounds, so one sent while offline still
    arrives) and hands the round's to `local` (the host's own board). `first_link`, when given,
    is called once before the first round: it waits (bounded) until the class is reachable.
    `progress` (e.g. NetworkTransport.publish_progress, which sends the newest every 2 s) and
    `local_progress` (the host's board) hear what it is doing, at most every PROGRESS_LOCAL_S
    seconds within a phase."""

    PROGRESS_LOCAL_S = 0.5

    def __init__(
        self,
        inner: Any,
        publish: Callable[[list[RoundStats]], None] | None,
        *,
        role: str = "member",
        local: Callable[[str, RoundStats], None] | None = None,
        first_link: Callable[[], Any] | None = None,
        log: Callable[[str], None] = lambda _m: None,
        progress: Callable[[Progress], None] | None = None,
        local_progress: Callable[[str, Progress], None] | None = None,
        last_word: Callable[[Progress], Any] | None = None,
        removals: Any = None,
        taught: Callable[[int, list[Any]], None] | None = None,
        hint_word: Any = None,
    ) -> None:
        super().__init__(inner)
        self.hint_word = hint_word  # hint.HintWord: the teacher's choice, at a round's start
        self.removals = removals  # removal.Removals: the teacher's, applied to the node's pool
        self.taught = taught  # the host's: the peer groups it trained on (taught.py)
        self.publish, self.role, self.local, self.log = publish, role, local, log
        self.first_link = first_link
        self.progress, self.local_progress = progress, local_progress
        self.last_word = last_word  # sends at once, before the network closes (its goodbye)
        self._said: tuple[str, int, float] = ("", -1, 0.0)  # phase, round, when
        self.scored: tuple[int, float] | None = None  # (round, its own mean reward) once scored
        self.node: Node | None = None
        self.recent: deque[RoundStats] = deque(maxlen=ROUNDS_PER_MESSAGE)

    def say(
        self, node: Node, phase: str, done: int = 0, total: int = 0, *, last: bool = False
    ) -> Progress | None:
        """Tell the class what this node is doing (a new phase at once, steps within one at most
        every PROGRESS_LOCAL_S); `last`: its last word, also sent at once (`last_word`). Never
        raises into training."""
        if self.progress is None and self.local_progress is None:
            return None
        now = time.monotonic()
        round_, rounds = int(node.round), int(node.cfg.rounds)
        if phase == "saving" and round_ >= rounds:
            phase = "done"  # the save after the last round: the run is over, not saving on
        last_phase, last_round, last_at = self._said
        recent = now - last_at < self.PROGRESS_LOCAL_S
        if (phase, round_) == (last_phase, last_round) and recent and not last:
            return None
        self._said = (phase, round_, now)
        try:
            p = Progress(
                phase,
                round=round_,
                rounds=rounds,
                done=max(0, min(done, total)),
                total=max(0, total),
                role=self.role,
                **node_claims(node),
                **({"reward": self.scored[1]} if self._scored_now(phase, round_) else {}),
            )
            if self.progress is not None:
                self.progress(p)
            if self.local_progress is not None:
                self.local_progress(node.node_id, p)
            if last and self.last_word is not None:
                self.last_word(p)
        except (ValueError, OSError, RuntimeError) as e:  # the row lags; training goes on
            self.log(f"class progress not sent: {e}")
            return None
        return p

    def on_phase(self, node: Node, phase: str) -> None:
        self.node = node
        if self.removals is not None:  # before it samples: none of a removed member's groups
            self.removals.apply(node.pool)
        if self.hint_word is not None and phase == "sampling":  # a round's prompts stay as begun
            self.hint_word.apply(node)
        if self.first_link is not None:
            wait, self.first_link = self.first_link, None
            self.say(node, "waiting")
            wait()
        self.say(node, phase)
        super().on_phase(node, phase)

    def on_progress(self, node: Node, phase: str, done: int, total: int, tokens: int) -> None:
        self.say(node, phase, done, total)
        super().on_progress(node, phase, done, total, tokens)

    def _scored_now(self, phase: str, round_: int) -> bool:
        """The round under way is scored (a stopped round is abandoned: its reward goes)."""
        return self.scored is not None and self.scored[0] == round_ and phase != "stopped"

    def on_scored(self, node: Node, reward: float) -> None:
        """The round's reward, told to the class at once (its chart and row need not wait for
        the train step): every progress of this round from now on carries it."""
        self.scored = (int(node.round), min(max(float(reward), 0.0), MAX_REWARD))
        self._said = ("", -1, 0.0)  # said now, however recently "scoring" was
        self.say(node, "scoring")
        super().on_scored(node, reward)

    def on_paused(self, node: Node, parked: bool) -> None:
        """The loop waits in pause (p) or goes on: the class sees "paused", not its last phase
        going quiet (the newest state is repeated while it lasts)."""
        if parked:
            self.say(node, "paused")
        super().on_paused(node, parked)

    def on_run_end(self, node: Node, outcome: str) -> None:
        """The run ended: its rounds done, or it stopped (q, an error): the class sees "done"
        or "left" at once, not "saving" going quiet."""
        done = outcome == "done" and node.round >= int(node.cfg.rounds)
        self.say(node, "done" if done else "stopped", last=True)
        super().on_run_end(node, outcome)

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
                if self.taught is not None:
                    self.taught(report.round, node.last_groups.external)
            except (ValueError, OSError) as e:  # the class view misses a round; training goes on
                self.log(f"class stats not sent for round {report.round + 1}: {e}")
        self.inner.on_round(report)
