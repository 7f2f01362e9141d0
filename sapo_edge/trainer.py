"""The SAPO round (Algorithm 1 of arXiv 2509.08721) for one node, top to bottom.

1. sample questions  2. generate G completions each  3. score  4. share a subset
5. build the I local + J external training set (externals re-verified here)  6. GRPO step
7. report, append metrics.jsonl, checkpoint.

What is trained is what was sampled and scored: own completions keep their sampled token ids and
end token; a peer's text is tokenised here and the reward is computed on the decoded tokens.
A round stopped before its training step leaves no trace in the question stream, the random
state or the peer pool, so a resumed run continues exactly as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from .advantages import is_informative
from .backends.base import LOAD_TIME_SETTINGS, Backend, Completion, Sample
from .checkpoints import find_latest, save_checkpoint
from .config import Config, ConfigError
from .mix import AdaptiveMix
from .prompts import build_messages
from .rewards import RewardConfig, score_completion
from .rollout import RolloutError, RolloutGroup, decode_batch, encode_batch
from .sampling import ExternalPool, ScoredGroup, sample_self, scored, select_subset
from .swarm.peers import PeerTally
from .swarm.transport import Transport
from .targeting import Success, targeted_limit, wanted
from .tasks import TaskError, TaskSampler, node_seed, regenerate


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
    mix: str = "fixed"  # how I/J were chosen: fixed (the config's) or adaptive (sapo_edge/mix.py)
    local_target: int = 0  # I asked for this round (local_used can be fewer: informative only)
    external_target: int = 0  # J asked for this round
    mix_progress: float | None = None  # adaptive: progress per round credited this round...
    mix_credited: int | None = None  # ...to this J (the J a finished block trained)
    external_targeted: int = 0  # external groups picked for teaching this node (targeted)
    gen_steps: int = 0  # decode steps of the round's generation (its longest completion)


@dataclass
class RoundGroups:
    """The groups behind a round's report (for dashboards, not written to metrics.jsonl):
    this node's own scored groups, with each one's domain, and the external groups trained on."""

    own: list[ScoredGroup]
    external: list[ScoredGroup]


PHASES = ("sampling", "generating", "scoring", "sharing", "training", "saving")
POOL_FILE = "pool.json"  # the peer pool, saved with each checkpoint
# Settings a running node cannot take (apply_settings refuses them with this reason): the model
# and LoRA shape are loaded, the question stream is seeded from them, the loop counts rounds.
RESTART_SETTINGS = LOAD_TIME_SETTINGS | {
    "seed",
    "name",
    "out_dir",
    "resume",
    "rounds",
    "nodes",
    "node_backends",
    "domains",
    "domain_configs",
    "mix",
}


class RoundStopped(Exception):
    """Raised when the node's stop check says so (at a phase boundary, a decode step or a
    micro-batch of the train step); nothing of the round is kept."""


class Callback(Protocol):
    def on_round(self, report: RoundReport) -> None: ...
    def on_message(self, node: str, text: str) -> None: ...
    def on_phase(self, node: Node, phase: str) -> None:
        """A new phase of the round starts (one of PHASES); optional for callbacks."""

    def on_progress(self, node: Node, phase: str, done: int, total: int, tokens: int) -> None:
        """Inside generating (decode steps of max_new_tokens, tokens so far) and training
        (micro-batches); optional for callbacks."""


class PrintCallback:
    """One readable line per round (headless runs, the simulator, non-terminal output)."""

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
        self.print(
            f"{r.node:>8} round {r.round:4d} | reward {r.reward_mean:.3f} (avg5 {avg:.3f}) | zero-adv {r.zero_adv_fraction:.0%}"
            f" | recv {r.received} | train {r.local_used}+{r.external_used} groups (ext {ext}) | gen {r.gen_tokens} tok {r.gen_seconds:.1f}s"
            f" | step {r.train_seconds:.1f}s loss {r.loss:+.4f} | {r.round_seconds:.1f}s/round | rss {r.peak_rss_mb:,.0f} MB"
        )

    def on_message(self, node: str, text: str) -> None:
        self.print(f"{node:>8} {text}")

    def on_phase(self, node: Node, phase: str) -> None:
        pass


class Node:
    """One SAPO node: its own policy (backend), question stream, rollout pool and transport."""

    def __init__(
        self,
        cfg: Config,
        backend: Backend,
        transport: Transport,
        *,
        node_id: str,
        name: str,
        model_id: str,
        out_dir: Path,
        callback: Callback | None = None,
    ):
        self.cfg, self.backend, self.transport = cfg, backend, transport
        self.node_id, self.name, self.model_id = node_id, name, model_id
        self.out_dir = Path(out_dir)
        self.callback = callback or PrintCallback()
        seed = node_seed(node_id, cfg.seed)  # each node draws its own questions
        self.sampler = TaskSampler(cfg.domains, cfg.domain_configs, seed)
        self.rng = random.Random(seed)
        self.mix = AdaptiveMix(seed)  # chooses J each round when cfg.mix is "adaptive"
        self.success = Success()  # recent own success per domain (targeted sampling)
        self.backend.reset(seed)  # LoRA weights from the node seed: two fresh runs are identical
        self.pool = ExternalPool(
            node_id, freshness_rounds=cfg.freshness_rounds, max_peer_share=cfg.max_peer_share
        )
        self.rewards = _reward_config(cfg)
        self._pool_before_sampling: tuple | None = None  # restored when a round stops
        self._received: int | None = None  # groups received by the round in flight
        self._received_carry = 0  # ...by a stopped attempt of it: reported when it completes
        self.round = 0
        self.peer_tally = PeerTally()  # per-producer counts of what arrived (peers table)
        self.last_groups = RoundGroups([], [])  # the latest round's groups, set before on_round
        self.stop_check: Callable[[], bool] | None = None  # True: abandon the round (RoundStopped)
        self.saved: tuple[int, Path] | None = None  # (round, checkpoint) saved or resumed last
        self.out_dir.mkdir(parents=True, exist_ok=True)
        cfg.save(self.out_dir / "config.json")

    @property
    def metrics_path(self) -> Path:
        return self.out_dir / "metrics.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.out_dir / "checkpoints"

    # ------------------------------------------------------------------------------ round
    def run_round(self) -> RoundReport:
        """One round; a RoundStopped leaves the sampler, random state and pool as they were."""
        sampler, rng = self.sampler.state_dict(), self.rng.getstate()
        mix = self.mix.state_dict()
        self._pool_before_sampling, self._received = None, None
        try:
            return self._run_round()
        except RoundStopped:
            self.sampler.load_state_dict(sampler)
            self.rng.setstate(rng)
            self.mix.load_state_dict(mix)
            if self._pool_before_sampling is not None:  # the groups taken are waiting again
                self.pool.restore(self._pool_before_sampling)
            if self._received is not None:  # what arrived stays in the pool and is reported
                self._received_carry = self._received  # by the attempt that completes
            raise

    def _run_round(self) -> RoundReport:
        cfg, t_round = self.cfg, time.perf_counter()
        self._phase("sampling")
        # 1. sample a batch of questions (the paper's SampleBatch: k domains, one question each)
        tasks = [regenerate(ref) for ref in self.sampler.sample_batch(cfg.questions_per_round)]

        # 2. generate G completions per question, all in one batched call
        self._phase("generating")
        t0 = time.perf_counter()
        gens = self.backend.generate(
            [build_messages(t.question) for t in tasks],
            cfg.group_size,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=self._round_seed(),
            progress=lambda step, tokens: self._progress(
                "generating", step, cfg.max_new_tokens, tokens
            ),
        )
        gen_seconds = time.perf_counter() - t0

        # 3. score with this node's own verifier: the text of the sampled ids (end token apart)
        self._phase("scoring")
        own: list[ScoredGroup] = []
        published: list[RolloutGroup] = []
        for task, group in zip(tasks, gens, strict=True):
            texts = [g.text for g in group]
            rewards = [score_completion(task, t, self.rewards) for t in texts]
            rg = RolloutGroup(
                task.ref,
                task.question,
                task.answer,
                tuple(texts),
                tuple(rewards),
                self.node_id,
                self.model_id,
                self.round,
                time.time(),
                finished=tuple(g.finished for g in group),
            )
            own.append(
                scored(
                    rg.group_id,
                    task.ref,
                    task.question,
                    texts,
                    rewards,
                    "self",
                    scale=cfg.scale_rewards,
                    tokens=list(group),  # trained as sampled: no decode/re-encode round trip
                )
            )
            published.append(rg)

        # 4. share a subset as plain text (SelectSubset)
        self._phase("sharing")
        shared = select_subset(published, cfg.share, cfg.share_max, self.rng)
        if shared:
            self.transport.publish(encode_batch(shared))

        # 5. training set: I own groups + J external groups, re-verified here
        received = self._received = self._received_carry + self._receive()
        self._received_carry = 0
        n_local, n_external = self._mix_targets(own)
        self._pool_before_sampling = self.pool.snapshot()
        if cfg.mix == "adaptive":  # peers first: own groups fill what they fell short of, so the
            external = self._sample_external(n_external, own, n_local)  # trains I' + J'
            local = sample_self(own, n_local + n_external - len(external), self.rng)
            self.mix.trained(len(external))  # the bandit credits the J trained, not the J asked
        else:
            local = sample_self(own, n_local, self.rng)
            external = self._sample_external(n_external, own, n_local)

        # 6. one GRPO step over every completion of the chosen groups. A completion with advantage
        #    exactly 0 (possible with lenient, partial-credit or format rewards) adds nothing to
        #    the surrogate but stays in the step: its tokens count in the DAPO token normaliser,
        #    as in TRL, and with beta > 0 it carries the KL term like any other sampled text.
        self._phase("training")
        samples = [
            Sample(build_messages(g.question), c, adv)
            for g in local + external
            for c, adv in zip(_trained(g), g.advantages, strict=True)
        ]
        stats = (
            self.backend.train_step(samples, lambda k, n: self._progress("training", k, n))
            if samples
            else None
        )

        # 7. report and persist
        self.success.update(own)
        report = self._report(
            own, tasks, gens, local, external, len(shared), received, gen_seconds, stats, t_round
        )
        report.external_targeted = self.pool.last_targeted
        report.local_target, report.external_target = n_local, n_external
        if cfg.mix == "adaptive":
            report.mix, report.mix_progress = "adaptive", self.mix.last_progress
            report.mix_credited = self.mix.last_credited
        with self.metrics_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(report)) + "\n")
        self.last_groups = RoundGroups(own, external)
        self.callback.on_round(report)
        self.round += 1
        if cfg.checkpoint_every and self.round % cfg.checkpoint_every == 0:
            self.save()
        return report

    def _mix_targets(self, own: list[ScoredGroup]) -> tuple[int, int]:
        """This round's I and J: the config's, or (mix adaptive) J from the bandit, fed with the
        mean reward of each of this round's own groups and offered only J the pool can fill,
        and I = local + external - J."""
        cfg = self.cfg
        if cfg.mix != "adaptive":
            return cfg.local_samples, cfg.external_samples
        budget = cfg.local_samples + cfg.external_samples
        j = self.mix.choose(
            [statistics.fmean(g.rewards) for g in own],
            budget,
            cfg.questions_per_round,
            available=lambda j: self.pool.fillable(j, self.round),
            min_local=1 if cfg.external_sampling == "targeted" else 0,  # never only peers
        )
        return budget - j, j

    def _sample_external(
        self, count: int, own: list[ScoredGroup], n_local: int
    ) -> list[ScoredGroup]:
        """SampleExternal: the paper's uniform draw from the pool, or (external_sampling
        targeted) first the peer groups that teach this node something, up to targeted_limit
        (a share of J, and never more than the own groups the step trains)."""
        self.pool.last_targeted = 0
        if not count:
            return []
        if self.cfg.external_sampling != "targeted":
            return self.pool.sample(count, self.round, self._rescore, self.rng)
        own_trained = min(n_local, sum(1 for g in own if is_informative(g.rewards)))
        return self.pool.sample(
            count,
            self.round,
            self._rescore,
            self.rng,
            prefer=wanted(own, self.success),
            prefer_max=targeted_limit(self.cfg.targeted_share, count, own_trained),
        )

    def _phase(self, phase: str) -> None:
        """Tell the callback a phase starts. Before each phase from generating to training, honour
        a stop request: nothing of a round is kept before its training step and metrics."""
        if (
            phase not in ("sampling", "saving")
            and self.stop_check is not None
            and self.stop_check()
        ):
            raise RoundStopped(f"round {self.round} stopped before {phase}")
        on_phase = getattr(self.callback, "on_phase", None)  # older callbacks may lack it
        if on_phase is not None:
            on_phase(self, phase)

    def _progress(self, phase: str, done: int, total: int, tokens: int = 0) -> None:
        """Inside generating (every decode step) and training (every micro-batch): a stop request
        abandons the round here, and the callback may show the progress."""
        if self.stop_check is not None and self.stop_check():
            raise RoundStopped(f"round {self.round} stopped while {phase}")
        on_progress = getattr(self.callback, "on_progress", None)
        if on_progress is not None:
            on_progress(self, phase, done, total, tokens)

    def _round_seed(self) -> int:
        return (node_seed(self.node_id, self.cfg.seed) * 1_000_003 + self.round) % 2**31

    def _receive(self) -> int:
        count = 0
        for sender, payload in self.transport.receive():
            try:
                groups = decode_batch(payload)
            except RolloutError as e:
                self.pool.reject(e.reason)
                self.peer_tally.payload_rejected(sender, e.reason)
                continue
            for g in groups:
                added = self.pool.add(g, self.round)
                count += added
                why = "" if added else "own" if g.producer == self.node_id else "duplicate"
                self.peer_tally.group(g.producer, g.model, g.rewards, added, why)
        return count

    def _rescore(self, group: RolloutGroup) -> ScoredGroup | None:
        """Regenerate the task from its ref (the question must be the one sent); tokenise each
        completion as it will be trained (cut at max_new_tokens, end of turn when finished) and
        score the text of those tokens; the producer's answer and rewards are ignored."""
        if not self.sampler.accepts(group.task_ref):  # not our domains/configs: never regenerated
            self.pool.reject("foreign_task")
            return None
        try:
            task = regenerate(group.task_ref)
        except TaskError:
            self.pool.reject("bad_task_ref")
            return None
        if group.question != task.question:  # e.g. another reasoning-gym version made another
            self.pool.reject("question_mismatch")  # question: its answers do not fit our prompt
            return None
        sent = list(zip(group.completions, group.finished, strict=True))[: self.cfg.group_size]
        comps, cut, changed = [], 0, 0
        for text, finished in sent:
            c = self.backend.encode_completion(
                text, finished=finished, max_new_tokens=self.cfg.max_new_tokens
            )
            whole = self.backend.encode_completion(text, finished=finished, max_new_tokens=2**31)
            comps.append(c)
            cut += c != whole  # longer than this node's max_new_tokens: cut there, unfinished
            changed += whole.text != text  # the tokenizer's normaliser changed the text
        if cut:  # ...and scored on the cut text
            self.pool.reject("peer_cut", cut)
        if changed:  # ...and scored on the text it trains
            self.pool.reject("peer_text_changed", changed)
        rewards = [score_completion(task, c.text, self.rewards) for c in comps]
        return scored(
            group.group_id,
            task.ref,
            task.question,
            [c.text for c in comps],
            rewards,
            group.producer,
            scale=self.cfg.scale_rewards,
            tokens=comps,
        )

    def _report(
        self, own, tasks, gens, local, external, n_shared, received, gen_seconds, stats, t_round
    ) -> RoundReport:
        all_rewards = [r for g in own for r in g.rewards]
        by_domain: dict[str, list[float]] = {}
        for task, g in zip(tasks, own, strict=True):
            by_domain.setdefault(task.domain, []).extend(g.rewards)
        informative = sum(1 for g in own if any(a != 0.0 for a in g.advantages))
        return RoundReport(
            node=self.name,
            round=self.round,
            reward_mean=statistics.fmean(all_rewards),
            reward_by_domain={d: statistics.fmean(v) for d, v in sorted(by_domain.items())},
            zero_adv_fraction=1 - informative / len(own),
            local_used=len(local),
            external_used=len(external),
            external_from=dict(Counter(g.origin for g in external)),
            published=n_shared,
            received=received,
            pool=self.pool.stats(),
            gen_tokens=sum(g.tokens for group in gens for g in group),
            gen_steps=max((g.tokens for group in gens for g in group), default=0),
            gen_seconds=gen_seconds,
            train_seconds=stats.seconds if stats else 0.0,
            train_tokens=stats.tokens if stats else 0,
            loss=stats.loss if stats else 0.0,
            peak_rss_mb=self.backend.memory_report()["peak_rss_mb"],
            round_seconds=time.perf_counter() - t_round,
        )

    # --------------------------------------------------------------------------- settings
    def configure(self, changes: dict) -> None:
        """Take new settings from the next round: the trainer, the reward, the pool and the backend
        all see them. Raises ConfigError (nothing applied) for a bad value or a setting that needs
        a restart."""
        fixed = sorted(
            k for k, v in changes.items() if k in RESTART_SETTINGS and v != getattr(self.cfg, k, v)
        )
        if fixed:
            raise ConfigError(
                f"{', '.join(fixed)} cannot change while the node runs (the model, LoRA shape and "
                "question stream are set at start): restart sapo-edge with the new value."
            )
        cfg = dataclasses.replace(self.cfg, **changes)  # __post_init__ validates
        try:
            self.backend.configure(cfg)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.cfg, self.rewards = cfg, _reward_config(cfg)
        self.pool.freshness_rounds = cfg.freshness_rounds
        self.pool.max_age_rounds = 4 * cfg.freshness_rounds
        self.pool.max_peer_share = cfg.max_peer_share
        cfg.save(self.out_dir / "config.json")

    # ------------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        self._phase("saving")
        state = {
            "round": self.round,  # the next round to run
            "node_id": self.node_id,
            "name": self.name,
            "model_id": self.model_id,
            "config": self.cfg.to_saved_dict(),  # never the room secret
            "sampler": self.sampler.state_dict(),
            "rng": _rng_to_json(self.rng.getstate()),
            "received_carry": self._received_carry,
            "mix": self.mix.state_dict(),
            "success": self.success.state_dict(),
        }
        pool = json.dumps(self.pool.state_dict())

        def write_files(directory: Path) -> None:
            self.backend.save(directory)
            (directory / POOL_FILE).write_text(pool, encoding="utf-8")

        path = save_checkpoint(
            self.checkpoint_dir, self.round, write_files, state, keep=self.cfg.keep_checkpoints
        )
        self.saved = (self.round, path)
        return path

    def resume(self) -> bool:
        """Continue from the newest complete checkpoint; False when there is none."""
        ckpt = find_latest(
            self.checkpoint_dir, log=lambda m: self.callback.on_message(self.name, m)
        )
        if ckpt is None:
            self.callback.on_message(
                self.name, f"no checkpoint in {self.checkpoint_dir}: starting at round 0"
            )
            self._truncate_metrics(0)  # rounds recorded before a kill are run again
            return False
        st = ckpt.state
        if st.get("model_id") != self.model_id:
            raise ValueError(
                f"checkpoint {ckpt.path} was trained on {st.get('model_id')!r}, not {self.model_id!r}: "
                "pass the same --model, or a fresh --out-dir."
            )
        self.backend.load(ckpt.path)
        self.sampler.load_state_dict(st["sampler"])
        self.rng.setstate(_rng_from_json(st["rng"]))
        self._received_carry = int(st.get("received_carry", 0))
        if "mix" in st:  # checkpoints of older versions have none (they ran a fixed mix)
            try:
                self.mix.load_state_dict(st["mix"])
            except (ValueError, TypeError, KeyError):  # an older bandit: its evidence is lost
                self.callback.on_message(
                    self.name, "the saved adaptive mix is an older version's: it starts afresh"
                )
        if "success" in st:  # checkpoints of older versions have none (uniform sampling)
            self.success.load_state_dict(st["success"])
        if (ckpt.path / POOL_FILE).is_file():  # checkpoints of older versions have none
            try:
                dropped = self.pool.load_state_dict(
                    json.loads((ckpt.path / POOL_FILE).read_text(encoding="utf-8"))
                )
            except (ValueError, TypeError) as e:  # written by another version: not worth a stop
                dropped = f"all ({e})"
            if dropped:
                self.callback.on_message(
                    self.name, f"{dropped} saved peer groups cannot be read here: left out"
                )
        self.round = int(st["round"])
        self.saved = (self.round, ckpt.path)
        self._truncate_metrics(self.round)
        self.callback.on_message(
            self.name, f"resumed from {ckpt.path.name}: next round {self.round}"
        )
        return True

    def _truncate_metrics(self, next_round: int) -> None:
        """Drop metrics of rounds run after the checkpoint (they are run again)."""
        if not self.metrics_path.exists():
            return
        keep = [
            ln
            for ln in self.metrics_path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and json.loads(ln).get("round", 0) < next_round
        ]
        tmp = self.metrics_path.with_suffix(".tmp")
        tmp.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")
        os.replace(tmp, self.metrics_path)


def _reward_config(cfg: Config) -> RewardConfig:
    return RewardConfig(
        lenient=cfg.lenient,
        lenient_credit=cfg.lenient_credit,
        format_reward=cfg.format_reward,
        partial_credit=cfg.partial_credit,
    )


def _trained(group: ScoredGroup) -> list[Completion]:
    """The completions of a scored group as they are trained (the trainer always scores tokens)."""
    if group.tokens is None:
        raise ValueError(f"group {group.group_id} has no tokens: score it with scored(tokens=...).")
    return group.tokens


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(data: list) -> tuple:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)


def read_rewards(metrics_path: Path) -> list[float]:
    """Mean reward of each round in a node's metrics.jsonl (empty when none yet)."""
    if not metrics_path.exists():
        return []
    lines = metrics_path.read_text(encoding="utf-8").splitlines()
    return [json.loads(ln)["reward_mean"] for ln in lines if ln.strip()]
