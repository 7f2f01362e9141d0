"""What a round reports: the RoundReport record (built from the round's pieces), its line in a node's metrics.jsonl (appended
each round, cut back to the checkpoint on resume, read back for rewards) and the one printed line
of headless runs (PrintCallback)."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..events import RunEvents
from .node_parts import NodeParts
from .prompts import extract_tagged
from .rewards import RewardConfig, score_completion

STRICT = RewardConfig()  # binary, tagged answers only: the paper's reward


@dataclass
class RoundReport:
    node: str
    round: int
    reward_mean: float  # mean reward of this node's own completions this round
    reward_by_domain: dict[str, float]
    zero_adv_fraction: float  # own groups whose completions all scored alike
    local_used: int
    external_used: int
    external_from: dict[str, int]  # producer -> groups trained on
    published: int
    received: int
    pool: dict[str, int]  # the external pool's counters: added, duplicate, rejections by reason...
    gen_tokens: int
    gen_seconds: float
    train_seconds: float
    train_tokens: int
    loss: float
    peak_rss_mb: float
    round_seconds: float
    time: float = field(default_factory=time.time)
    mix: str = (
        "fixed"  # how I/J were chosen: fixed (the config's) or adaptive (sapo_edge/rl/mix.py)
    )
    local_target: int = 0  # I asked for this round (local_used can be fewer: informative only)
    external_target: int = 0  # J asked for this round
    held_back: bool = False  # ...and held back (rl/peers_alone.py): none trained, all kept
    claimed_reward: float | None = None  # the mean reward producers claimed for the groups
    # received this round (the swarm's own word: this node re-scores before training on any)
    mix_progress: float | None = None  # adaptive: progress per round credited this round...
    mix_credited: int | None = None  # ...to this J (the J a finished block trained)
    external_targeted: int = 0  # external groups picked for teaching this node (targeted)
    external_zeroed: int = 0  # peer completions trained at advantage 0 (external_negatives off)
    # CPU seconds of this process in the round (every thread's): unlike round_seconds, about the
    # same on a busy machine, so what a round costs on a quiet one; with other work in the same
    # process (a dashboard, a web page) it counts that too
    round_cpu_seconds: float = 0.0
    gen_steps: int = 0  # decode steps of the round's generation (its longest completion)
    # the answer format as a skill (experiments/aha.toml): the share of own completions with an
    # answer in <answer> tags, and their strict reward (a right answer counts only in tags),
    # whatever this node's own reward settings are
    tagged_share: float = 0.0
    strict_reward: float = 0.0


# The fields that differ between two runs of the same rounds (timings and memory, and the claims
# of the groups this process saw arrive: a round stopped and resumed lost its first attempt's): a
# resumed run equals the uninterrupted one in every other field.
MEASURED = (
    "gen_seconds",
    "train_seconds",
    "round_seconds",
    "round_cpu_seconds",
    "time",
    "peak_rss_mb",
    "claimed_reward",
)


def round_report(
    node: NodeParts,
    own,
    tasks,
    gens,
    local,
    external,
    n_shared,
    received,
    gen_seconds,
    stats,
    started,
) -> RoundReport:
    """A trainer.Node's report of the round it just ran (before its round counter moves on);
    started: time.perf_counter() and time.process_time() when the round began."""
    all_rewards = [r for g in own for r in g.rewards]
    by_domain: dict[str, list[float]] = {}
    for task, g in zip(tasks, own, strict=True):
        by_domain.setdefault(task.domain, []).extend(g.rewards)
    informative = sum(1 for g in own if any(a != 0.0 for a in g.advantages))
    texts = [(task, g.text) for task, group in zip(tasks, gens, strict=True) for g in group]
    return RoundReport(
        node=node.name,
        round=node.round,
        reward_mean=statistics.fmean(all_rewards),
        reward_by_domain={d: statistics.fmean(v) for d, v in sorted(by_domain.items())},
        zero_adv_fraction=1 - informative / len(own),
        local_used=len(local),
        external_used=len(external),
        external_from=dict(Counter(g.origin for g in external)),
        published=n_shared,
        received=received,
        pool=node.pool.stats(),
        gen_tokens=sum(g.tokens for group in gens for g in group),
        gen_steps=max((g.tokens for group in gens for g in group), default=0),
        gen_seconds=gen_seconds,
        train_seconds=stats.seconds if stats else 0.0,
        train_tokens=stats.tokens if stats else 0,
        loss=stats.loss if stats else 0.0,
        peak_rss_mb=node.backend.memory_report()["peak_rss_mb"],
        round_seconds=time.perf_counter() - started[0],
        round_cpu_seconds=time.process_time() - started[1],
        tagged_share=statistics.fmean(extract_tagged(t) is not None for _, t in texts),
        strict_reward=statistics.fmean(score_completion(task, t, STRICT) for task, t in texts),
    )


def append_metrics(metrics_path: Path, report: RoundReport) -> None:
    """One line of metrics.jsonl per round: the report as JSON."""
    with metrics_path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(report)) + "\n")


def truncate_metrics(metrics_path: Path, next_round: int) -> None:
    """Drop metrics of rounds run after the checkpoint (they are run again)."""
    if not metrics_path.exists():
        return
    keep = [
        ln
        for ln in metrics_path.read_text(encoding="utf-8").splitlines()
        if ln.strip() and json.loads(ln).get("round", 0) < next_round
    ]
    tmp = metrics_path.with_suffix(".tmp")
    tmp.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")
    os.replace(tmp, metrics_path)


def read_rewards(metrics_path: Path) -> list[float]:
    """Mean reward of each round in a node's metrics.jsonl (empty when none yet)."""
    if not metrics_path.exists():
        return []
    lines = metrics_path.read_text(encoding="utf-8").splitlines()
    return [json.loads(ln)["reward_mean"] for ln in lines if ln.strip()]


class PrintCallback(RunEvents):
    """One readable line per round (headless runs, the simulator, non-terminal output), its round
    counted from 1 as the dashboard, the class view and the page count it (metrics.jsonl from 0)."""

    def __init__(self, print_fn: Callable[[str], None] = print):
        self.print = print_fn
        self.history: dict[str, list[float]] = {}

    def on_round(self, r: RoundReport) -> None:
        h = self.history.setdefault(r.node, [])
        h.append(r.reward_mean)
        avg = statistics.fmean(h[-5:])
        ext = ",".join(f"{k[:16]}:{v}" for k, v in sorted(r.external_from.items())) or "-"
        if r.mix == "adaptive":
            ext += f", J={r.external_target} chosen"
        # J=0 (a solo baseline): what arrived is kept, none of it trained (issue 57: "recv 8")
        recv = f"{r.received} unused (J=0)" if r.received and not r.external_target else r.received
        recv = f"{r.received} kept (held back: own groups all alike)" if r.held_back else recv
        self.print(
            f"{r.node:>8} round {r.round + 1:4d} | reward {r.reward_mean:.3f} (avg5 {avg:.3f}) | zero-adv {r.zero_adv_fraction:.0%}"
            f" | recv {recv} | train {r.local_used}+{r.external_used} groups (ext {ext}) | gen {r.gen_tokens} tok {r.gen_seconds:.1f}s"
            f" | step {r.train_seconds:.1f}s loss {r.loss:+.4f} | {r.round_seconds:.1f}s/round | rss {r.peak_rss_mb:,.0f} MB"
        )

    def on_message(self, node: str, text: str) -> None:
        self.print(f"{node:>8} {text}")

    def on_phase(self, node: object, phase: str) -> None:  # a trainer.Node; nothing to print
        pass

    def on_scored(self, node: NodeParts, reward: float) -> None:
        """The session's first round, once scored (a class draws it now): a line before its
        train step; later rounds are said once, when done."""
        if node.name not in self.history:
            # not a round's line ("round N | ..."): the round is not done
            self.print(
                f"{node.name:>8} round {node.round + 1} scored: reward {reward:.3f}, training"
            )
