"""The SAPO round (Algorithm 1 of arXiv 2509.08721) for one node, top to bottom.

1. sample questions  2. generate G completions each  3. score  4. share a subset  5. build the
I local + J external training set (re-verified here)  6. GRPO step  7. report, metrics, checkpoint.

What is trained is what was sampled and scored: own completions keep their sampled token ids and
end token; a peer's text is tokenised here and the reward is computed on the decoded tokens.
A stopped round leaves its node's state (node_state.PARTS) and pool as they were: exact resume.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import Backend, Completion, Sample
from ..config.settings import Config
from ..data.rollout import RolloutError, RolloutGroup, encode_batch, groups_of
from ..data.seeds import node_seeds
from ..data.task_sampler import TaskSampler
from ..data.tasks import TaskError, regenerate
from ..events import RunEvents, events
from ..swarm.peers import PeerTally
from ..swarm.transport import Transport
from . import node_state
from .advantages import is_informative
from .metrics import PrintCallback, RoundReport, append_metrics, round_report
from .mix import AdaptiveMix
from .node_checkpoint import resume_node, save_node
from .node_settings import apply_settings, reward_config
from .node_state import restore, snapshot
from .peer_text import peer_completions
from .peers_alone import external_target
from .pool import ExternalPool
from .prompts import node_messages
from .rewards import score_completion
from .sampling import ScoredGroup, sample_self, scored, select_subset
from .targeting import Success, targeted_limit, wanted


@dataclass
class RoundGroups:
    """The groups behind a round's report (for dashboards, not written to metrics.jsonl):
    this node's own scored groups, with each one's domain, and the external groups trained on."""

    own: list[ScoredGroup]
    external: list[ScoredGroup]


PHASES = ("sampling", "generating", "scoring", "sharing", "training", "saving")


class RoundStopped(Exception):
    """Raised when the node's stop check says so (at a phase boundary, a decode step or a
    micro-batch of the train step); nothing of the round is kept."""


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
        callback: RunEvents | None = None,
    ):
        self.cfg, self.backend, self.transport = cfg, backend, transport
        self.node_id, self.name, self.model_id = node_id, name, model_id
        self.out_dir = Path(out_dir)
        self.callback = callback or PrintCallback()  # made a RunEvents by the setter
        self.seeds = seeds = node_seeds(node_id, cfg.seed)  # one stream per purpose (data/seeds)
        self.sampler = TaskSampler(cfg.domains, cfg.domain_configs, seeds.questions)
        self.rng = random.Random(seeds.choices)
        self.mix = AdaptiveMix(seeds.mix)  # chooses J each round when cfg.mix is "adaptive"
        self.success = Success()  # recent own success per domain (targeted sampling)
        self.backend.reset(seeds.lora)  # the same LoRA weights in two fresh runs of one seed
        pool_kw = dict(freshness_rounds=cfg.freshness_rounds, max_peer_share=cfg.max_peer_share)
        self.pool = ExternalPool(node_id, accepts=self.sampler.accepts, **pool_kw)
        self.rewards = reward_config(cfg)
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
    def callback(self) -> RunEvents:
        return self._callback

    @callback.setter  # any watcher; an old duck-typed one adapted
    def callback(self, value: object) -> None:
        self._callback = events(value)

    @property
    def metrics_path(self) -> Path:
        return self.out_dir / "metrics.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.out_dir / "checkpoints"

    # ------------------------------------------------------------------------------ round
    def run_round(self) -> RoundReport:
        """One round; a RoundStopped leaves the sampler, random state and pool as they were."""
        before = snapshot(self)  # node_state.PARTS: what the rollback, save and resume hold
        self._pool_before_sampling, self._received = None, None
        try:
            return self._run_round()
        except RoundStopped:
            restore(self, before, unreadable=node_state.never)
            if self._pool_before_sampling is not None:  # the groups taken are waiting again
                self.pool.restore(self._pool_before_sampling)
            if self._received is not None:  # what arrived stays in the pool and is reported
                self._received_carry = self._received  # by the attempt that completes
            raise

    def _messages(self, question: str) -> list[dict[str, str]]:
        """The chat prompt a question is sampled and trained with (the same for both)."""
        return node_messages(question, self.cfg)

    def _run_round(self) -> RoundReport:
        cfg, started = self.cfg, (time.perf_counter(), time.process_time())
        self._phase("sampling")
        # 1. sample a batch of questions (the paper's SampleBatch: k domains, one question each)
        tasks = self.sampler.build_batch(cfg.questions_per_round)  # (one it cannot build: skipped)

        # 2. generate G completions per question, all in one batched call
        self._phase("generating")
        t0 = time.perf_counter()
        gens = self.backend.generate(
            [self._messages(t.question) for t in tasks],
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

        self.callback.on_scored(self, statistics.fmean(r for g in own for r in g.rewards))

        # 4. share a subset as plain text (SelectSubset)
        self._phase("sharing")
        shared = select_subset(published, cfg.share, cfg.share_max, self.rng)
        if shared:
            self.transport.publish(encode_batch(shared))

        # 5. training set: I own groups + J external groups, re-verified here
        received = self._received = self._received_carry + self._receive()
        self._received_carry = 0
        n_local, n_external = self._mix_targets(own)
        asked, n_external = n_external, external_target(own, self.cfg, n_external)  # see there
        self._pool_before_sampling = self.pool.snapshot()
        if cfg.mix == "adaptive":  # peers first: own groups fill what they fell short of, so the
            external = self._sample_external(n_external, own, n_local)  # trains I' + J'
            local = sample_self(own, n_local + n_external - len(external), self.rng)
            if n_external < asked:  # held back: the J asked did not decide this round
                self.mix.withheld()
            else:
                self.mix.trained(len(external))  # the bandit credits the J trained
        else:
            local = sample_self(own, n_local, self.rng)
            external = self._sample_external(n_external, own, n_local)

        # 6. one GRPO step over every completion of the chosen groups. A completion with advantage
        #    exactly 0 (possible with lenient, partial-credit or format rewards) adds nothing to
        #    the surrogate but stays in the step: its tokens count in the DAPO token normaliser,
        #    as in TRL, and with beta > 0 it carries the KL term like any other sampled text.
        #    external_negatives = false trains the peers' completions with a negative advantage
        #    at advantage 0 (own groups keep theirs): peers then teach by their right answers
        #    only, and the step's token normaliser is the same as with their negatives.
        self._phase("training")
        samples = [
            Sample(self._messages(g.question), c, adv)
            for g in local
            for c, adv in zip(_trained(g), g.advantages, strict=True)
        ] + [
            Sample(self._messages(g.question), c, adv if cfg.external_negatives else max(adv, 0.0))
            for g in external
            for c, adv in zip(_trained(g), g.advantages, strict=True)
        ]
        stats = (
            self.backend.train_step(samples, lambda k, n: self._progress("training", k, n))
            if samples
            else None
        )

        # 7. report and persist
        self.success.update(own)
        report = round_report(
            self,
            own,
            tasks,
            gens,
            local,
            external,
            len(shared),
            received,
            gen_seconds,
            stats,
            started,
        )
        report.external_targeted = self.pool.last_targeted
        report.external_zeroed = (
            0 if cfg.external_negatives else sum(a < 0 for g in external for a in g.advantages)
        )
        report.local_target, report.external_target = n_local, asked
        report.held_back = n_external < asked
        claimed = self.peer_tally.take_claimed()  # on the report: every watcher sees it
        report.claimed_reward = sum(claimed) / len(claimed) if claimed else None
        if cfg.mix == "adaptive":
            report.mix, report.mix_progress = "adaptive", self.mix.last_progress
            report.mix_credited = self.mix.last_credited
        append_metrics(self.metrics_path, report)
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
        (a share of J, and never more than the own groups the step trains unless it trains none)."""
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
        self.callback.on_phase(self, phase)

    def _progress(self, phase: str, done: int, total: int, tokens: int = 0) -> None:
        """Inside generating (every decode step) and training (every micro-batch): a stop request
        abandons the round here, and the callback may show the progress."""
        if self.stop_check is not None and self.stop_check():
            raise RoundStopped(f"round {self.round} stopped while {phase}")
        self.callback.on_progress(self, phase, done, total, tokens)

    def _round_seed(self) -> int:
        return (self.seeds.generation * 1_000_003 + self.round) % 2**31

    def _receive(self) -> int:
        count = 0
        for sender, payload in self.transport.receive():
            try:
                groups = groups_of(payload)  # the network verified and decoded it once
            except RolloutError as e:
                self.pool.reject(e.reason)
                self.peer_tally.payload_rejected(sender, e.reason)
                continue
            for g in groups:
                added = self.pool.add(g, self.round)  # (own, empty, foreign or seen: refused)
                count += added
                self.peer_tally.group(g.producer, g.model, g.rewards, added, self.pool.last_refusal)
        return count

    def _rescore(self, group: RolloutGroup) -> ScoredGroup | None:
        """Regenerate the task from its ref (the question must be the one sent); each completion
        as it will be trained (peer_text.py: cut after its answer unless external_after_answer
        is train, tokenised, cut at max_new_tokens) scored on the text of those tokens; the
        producer's answer and rewards are ignored."""
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
        comps = peer_completions(self.backend, sent, self.cfg, self.pool.reject)
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

    # --------------------------------------------------------------------------- settings
    def configure(self, changes: dict) -> None:
        """Take new settings from the next round (node_settings.apply_settings); raises
        ConfigError (nothing applied) for a bad value or a setting that needs a restart."""
        apply_settings(self, changes)

    # ------------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        self._phase("saving")
        return save_node(self)

    def resume(self) -> bool:
        """Continue from the newest complete checkpoint; False when there is none."""
        return resume_node(self)


def _trained(group: ScoredGroup) -> list[Completion]:
    """The completions of a scored group as they are trained (the trainer always scores tokens)."""
    if group.tokens is None:
        raise ValueError(f"group {group.group_id} has no tokens: score it with scored(tokens=...).")
    return group.tokens
