"""Held-out evaluation: pass@1 (mean verifier reward over sampled completions) on questions no
node trains on, for the base model or a node's checkpoint. Used by `sapo-edge eval`.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import load_backend, select_backend
from ..config.settings import Config
from ..data.task_sampler import TaskSampler
from ..data.tasks import Task, regenerate
from ..models.resolve import resolve_model
from ..rl.checkpoints import STATE, find_latest
from ..rl.node_settings import reward_config
from ..rl.prompts import node_messages
from ..rl.rewards import RewardConfig, score_completion

# Node seeds are 31-bit (data/seeds.py); held-out questions come from seeds at 2**40 and up,
# so no node's question stream reaches them.
HELDOUT_SEED = 2**40


@dataclass
class EvalResult:
    questions: int
    samples: int  # completions per question
    pass_at_1: float  # mean reward over all completions
    by_domain: dict[str, float]
    source: str  # "base model" or the checkpoint directory
    scores: list[float] = field(default_factory=list)  # every completion's reward

    def table(self) -> str:
        rows = [f"{'domain':<26} {'pass@1':>7}"]
        rows += [f"{d:<26} {v:>7.3f}" for d, v in sorted(self.by_domain.items())]
        rows.append(f"{'all':<26} {self.pass_at_1:>7.3f}")
        head = f"{self.questions} held-out questions x {self.samples} samples, {self.source}"
        return head + "\n" + "\n".join(rows)


def heldout_tasks(cfg: Config, questions: int, seed: int = 0) -> list[Task]:
    """The same questions for every run with the same domains, configs and seed."""
    sampler = TaskSampler(cfg.domains, cfg.domain_configs, HELDOUT_SEED + seed)
    return [regenerate(ref) for ref in sampler.sample_batch(questions)]


PROMPT_SETTINGS = ("format_example", "format_instruction")  # what shapes the prompt asked


def _as_trained(cfg: Config, checkpoint: Path, log: Callable[[str], None]) -> Config:
    """An adapter is asked with the prompt it trained with: its checkpoint's prompt settings
    (the worked example, the instruction after the question) win over this run's (a flag or
    preset left at its default would otherwise change the prompt under it), and the log says so."""
    try:
        saved = json.loads((checkpoint / STATE).read_text(encoding="utf-8"))["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return cfg  # an older checkpoint, or not one of ours: the run's setting stands
    if not isinstance(saved, dict):
        return cfg
    trained = {k: saved.get(k, False) for k in PROMPT_SETTINGS}
    changed = {k: v for k, v in trained.items() if isinstance(v, bool) and v != getattr(cfg, k)}
    if not changed:
        return cfg
    said = ", ".join(f"{k} = {str(v).lower()}" for k, v in changed.items())
    log(f"{checkpoint} trained with {said}: evaluating with the prompts it trained with.")
    return dataclasses.replace(cfg, **changed)


def evaluate(
    cfg: Config,
    *,
    questions: int,
    samples: int,
    checkpoint: str = "",
    seed: int = 0,
    log: Callable[[str], None] = print,
    example: bool | None = None,
    strict: bool = False,
) -> EvalResult:
    """pass@1 on held-out questions. A checkpoint is asked with the prompts it trained with,
    unless `example` says whether they show the worked example; `strict` scores every adapter
    alike, a right answer counting only inside <answer> tags (the config's reward otherwise)."""
    if questions < 1 or samples < 1:
        raise ValueError("--questions and --samples must be 1 or more.")
    tasks = heldout_tasks(cfg, questions, seed)  # a bad domain fails before the model loads
    kind, device = select_backend(cfg.backend, log=log)
    model = resolve_model(cfg.model, progress=log)
    backend = load_backend(model.path, cfg, adapter="eval", device=device, log=log, kind=kind)
    source = "base model"
    try:
        if checkpoint:
            path = Path(checkpoint)
            if not (
                path / "COMPLETE"
            ).is_file():  # a node's folder or checkpoints/: take the newest
                found = find_latest(
                    path / "checkpoints" if (path / "checkpoints").is_dir() else path, log
                )
                if found is None:
                    raise ValueError(
                        f"no complete checkpoint under {path}: pass a round-NNNNNN folder or a node's output folder."
                    )
                path = found.path
            backend.load(path)
            source = f"checkpoint {path}"
            if example is None:
                cfg = _as_trained(cfg, path, log)
        if example is not None:
            cfg = dataclasses.replace(cfg, format_example=example)
        rewards = RewardConfig() if strict else reward_config(cfg)
        gens = backend.generate(
            [node_messages(t.question, cfg) for t in tasks],
            samples,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=HELDOUT_SEED % 2**31 + seed,
        )
    finally:
        backend.close()
    by_domain: dict[str, list[float]] = {}
    for task, group in zip(tasks, gens, strict=True):
        by_domain.setdefault(task.domain, []).extend(
            score_completion(task, g.text, rewards) for g in group
        )
    scores = [s for v in by_domain.values() for s in v]
    return EvalResult(
        questions,
        samples,
        statistics.fmean(scores),
        {d: statistics.fmean(v) for d, v in by_domain.items()},
        source,
        scores,
    )
