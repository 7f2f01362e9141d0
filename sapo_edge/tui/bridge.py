"""The trainer callback of the dashboard: turns a node's phases and rounds into messages.

Runs on the training thread; everything it sends is a small dataclass from messages.py, posted
with a thread-safe `post` (App.post_message).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.message import Message

from ..events import RunEvents
from ..rl.aha import aha_flags, best
from ..swarm.peers import peer_snapshot
from ..swarm.transport import NullTransport
from .messages import (
    LogLine,
    NodeStarted,
    NothingTrained,
    Notice,
    PeersUpdated,
    PhaseProgress,
    PhaseStarted,
    Problem,
    Rollout,
    RolloutsSeen,
    RoundDone,
    RoundScored,
    SettingsApplied,
)
from .nothing_trained import why_nothing_trained

if TYPE_CHECKING:
    from ..rl.trainer import Node

NO_PEERS_AFTER_ROUNDS = 5  # warn when J > 0 and nothing arrived by then
NO_PEERS_TITLE = "No peers yet"  # the one warning a round that received groups clears
PROGRESS_EVERY = 0.25  # seconds between progress messages (decode steps come much faster)


class TuiCallback(RunEvents):
    def __init__(self, post: Callable[[Message], Any], clock: Callable[[], float] = time.time):
        self.post, self.clock = post, clock
        self.node: Node | None = None
        self.round_started = 0.0
        self.last_round_seconds: float | None = None
        self.received_total = 0
        self.best_reward = 0.0  # the best mean reward of the rounds so far (why_nothing_trained)
        self.warned_no_peers = False
        self.progress_posted = 0.0
        self.tokens = self.live = 0  # generating: tokens so far, completions still running

    # ------------------------------------------------------------------ Callback protocol
    def on_phase(self, node: Node, phase: str) -> None:
        if self.node is None:
            self.node = node
            self.post(node_started(node))
        now = self.clock()
        if phase == "sampling":
            self.round_started = now
        if phase in ("generating", "training"):
            self.tokens = self.live = 0
            self.progress_posted = float("-inf")  # the phase's first step shows at once
        self.post(PhaseStarted(node.round, phase, now, self.round_started, self.last_round_seconds))

    def on_progress(self, node: Node, phase: str, done: int, total: int, tokens: int) -> None:
        """Every decode step / micro-batch (training thread): a message at most every
        PROGRESS_EVERY seconds, and for every micro-batch (they are slow)."""
        rows = node.cfg.questions_per_round * node.cfg.group_size
        if phase == "generating":
            self.live, self.tokens = tokens - self.tokens, tokens  # one token per running row
        now = self.clock()
        if phase == "generating" and now - self.progress_posted < PROGRESS_EVERY:
            return
        self.progress_posted = now
        finished = rows - self.live if phase == "generating" else 0
        self.post(PhaseProgress(node.round, phase, done, total, tokens, rows, finished, now))

    def on_scored(self, node: Node, reward: float) -> None:
        self.post(RoundScored(node.round, reward))

    def on_settings(self, node: Node, applied: dict) -> None:
        self.post(SettingsApplied(dict(applied)))

    def on_round(self, r: Any) -> None:
        node = self.node
        self.last_round_seconds = r.round_seconds
        self.received_total += r.received
        self.post(
            RoundDone(
                r.round,
                r.reward_mean,
                r.claimed_reward,
                dict(r.reward_by_domain),
                r.gen_tokens,
                r.gen_seconds,
                r.round_seconds,
                r.loss,
                _memory_mb(node) or r.peak_rss_mb,
                r.local_used,
                r.external_used,
                r.received,
                r.pool.get("size", 0),
                r.external_target if r.mix == "adaptive" else None,
                external_none=r.external_target == 0,
            )
        )
        if node is None:
            return
        has_transport_view = callable(getattr(node.transport, "peers", None))
        peers = peer_snapshot(node.transport, node.peer_tally)
        self.post(PeersUpdated(peers, self.clock(), "transport" if has_transport_view else "seen"))
        names = {p.node_id: p.name or p.node_id for p in peers}
        self.post(RolloutsSeen(rollouts_of(r.round, node.last_groups, names)))
        why = why_nothing_trained(r, node.last_groups.own, node.cfg, self.best_reward)
        if why is not None:
            self.post(NothingTrained(r.round, *why))
        self.best_reward = max(self.best_reward, r.reward_mean)
        self._maybe_warn_no_peers(node, r.round)

    def on_message(self, node: str, text: str) -> None:
        self.post(LogLine(f"{node}: {text}"))

    def on_notice(self, node: str, text: str) -> None:
        self.post(Notice(text))

    # ---------------------------------------------------------------------------- helpers
    def _maybe_warn_no_peers(self, node: Node, round_: int) -> None:
        if self.warned_no_peers or node.cfg.external_samples == 0 or self.received_total:
            return
        if round_ + 1 < NO_PEERS_AFTER_ROUNDS:
            return
        self.warned_no_peers = True
        where = node.transport.describe()
        if isinstance(node.transport, NullTransport):  # alone by design: no path to look for
            remedy = (
                f"This node runs {where}: its J={node.cfg.external_samples} external samples find "
                "none. Set J to 0 in the settings (c) to train alone on purpose, or run "
                "`sapo-edge sim` to train a swarm on this machine."
            )
        else:
            remedy = (
                f"Nothing arrived in {round_ + 1} rounds ({where}). Check that the other nodes use "
                f"the same room ({node.cfg.room}) and this network. Peers beyond this network: "
                "quit (q) and run the command printed on exit with --relay ws://HOST:7745 "
                "(a `sapo-edge relay` they all reach). J=0 in the settings (c) trains alone."
            )
        self.post(Problem(NO_PEERS_TITLE, remedy, fatal=False))


def node_started(node: Node) -> NodeStarted:
    b, cfg = node.backend, node.cfg
    return NodeStarted(
        name=node.name,
        node_id=node.node_id,
        room=str(cfg.room or ""),
        transport=node.transport.describe(),
        backend=b.name,
        device=str(b.device),
        dtype=str(b.dtype),
        model=node.model_id,
        lora_parameters=b.trainable_parameters(),
        memory_mb=_memory_mb(node) or 0.0,
        rounds=cfg.rounds,
        local_samples=cfg.local_samples,
        external_samples=cfg.external_samples,
        history=reward_history(node.metrics_path, node.round),
    )


def reward_history(path: Any, before: int, limit: int = 100_000) -> list[tuple[int, float]]:
    """(round, mean reward) of the rounds before `before` in a node's metrics.jsonl (a resumed
    run's chart starts from them); a torn or odd line is skipped, never an error."""
    if not before or path is None:
        return []
    out: dict[int, float] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                    r, reward = obj["round"], float(obj["reward_mean"])
                except (ValueError, KeyError, TypeError):
                    continue
                if isinstance(r, int) and 0 <= r < before and math.isfinite(reward):
                    out[r] = reward
                if len(out) >= limit:
                    break
    except OSError:
        return []
    return sorted(out.items())


def _memory_mb(node: Node) -> float | None:
    if node is None:
        return None
    report = node.backend.memory_report()
    return max(report.get("cuda_peak_mb", 0.0), report.get("peak_rss_mb", 0.0)) or None


def rollouts_of(
    round_: int, groups: Any, names: dict[str, str], own_shown: int = 3
) -> list[Rollout]:
    """A few of the round's own groups and every external group used, one completion each,
    each external one marked when it is an Aha (see aha.py)."""
    out = []
    for g in groups.own[:own_shown]:
        i = best(g)
        out.append(
            Rollout(round_, g.task_ref.dataset, g.question, g.completions[i], g.rewards[i], "local")
        )
    for g, aha in zip(groups.external, aha_flags(groups.own, groups.external), strict=True):
        i = best(g)
        out.append(
            Rollout(
                round_,
                g.task_ref.dataset,
                g.question,
                g.completions[i],
                g.rewards[i],
                names.get(g.origin, g.origin),
                aha=aha,
            )
        )
    return out
