"""Defaults chosen by time: how long a round of given settings takes on this machine, and the
first candidate (Qwen before SmolLM2) that fits memory and a round-time target.

The estimate counts a round's work and divides by this machine's measured speed:
- generation: every decode step reads all weights once and multiplies them with the live rows,
  so a step costs max(weight bytes / memory bandwidth, rows x FLOPs per row / GEMM rate), for
  about `COMPLETION_SHARE` of max_new_tokens steps, plus the prompts' prefill;
- the train step: forward and backward to the inputs (the base is frozen) over I+J groups,
  each prompt once and every completion, at the GEMM rate.
The rates come from a short probe at the model's own shapes (`backends.machine_rates`, cached
per machine). Known overheads (attention, norms, sampling, Python) make a phase ~1.7-1.9x its
GEMM floor (docs/benchmarks.md), hence `OVERHEAD`. Then the truth corrects it: after a real
round the measured/estimated ratio for that model in that dtype is kept per machine (`learn`), so
the second start of `sapo-edge` on a laptop estimates from what that laptop did (and `--dtype auto`
compares the dtypes' rounds: dtype_pace.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.model_name import hub_only, model_name
from ..config.settings import Config
from .fit import DEFAULT_MODEL, GB, KNOWN, SMALL_MODEL, Memory, Shape, estimate_bytes
from .pace_cache import MODEL_IDS, Correction, PaceCache, Rates

ROUND_TARGET = 60.0  # seconds: a class sees a round about every minute
OVERHEAD = 1.8  # a phase's time over its GEMM floor, before any round was measured here
COMPLETION_SHARE = 0.75  # mean completion length over max_new_tokens (early stops)
STEP_SHARE = 0.9  # decode steps over max_new_tokens: the batch runs until its longest ends
PROMPT_TOKENS = 120  # a reasoning-gym prompt in the chat template, on average
QWEN = DEFAULT_MODEL


@dataclass(frozen=True)
class Candidate:
    label: str  # said to the user
    settings: dict[str, Any]  # CLI settings: "model", "preset" and any Config field

    def config(self) -> Config:
        return Config.load("", dict(self.settings))


# In order of preference: Qwen is the product's model, at the paper's work or lighter; SmolLM2
# on addition is the fallback every laptop runs.
CANDIDATES = [
    Candidate(f"{QWEN} at the paper's settings", {"model": QWEN, "preset": "paper"}),
    Candidate(
        f"{QWEN} on the paper's 9 domains, 4 questions x 4 completions of up to 128 tokens",
        {
            "model": QWEN,
            "preset": "paper",
            "questions_per_round": 4,
            "group_size": 4,
            "local_samples": 2,
            "external_samples": 2,
            "max_new_tokens": 128,
        },
    ),  # fmt: skip
    Candidate(
        f"{QWEN} on two-digit arithmetic (--preset arithmetic)",
        {"model": QWEN, "preset": "arithmetic"},
    ),  # fmt: skip
    Candidate(f"{QWEN} on one-digit addition", {"model": QWEN, "preset": "addition"}),
    Candidate(
        f"{SMALL_MODEL} on one-digit addition (--preset addition)",
        {"model": SMALL_MODEL, "preset": "addition"},
    ),  # fmt: skip
]


@dataclass
class Estimate:
    gen_s: float
    train_s: float
    corrected: bool = False  # scaled by rounds measured on this machine

    @property
    def round_s(self) -> float:
        return self.gen_s + self.train_s


def estimate(
    shape: Shape, cfg: Config, rates: Rates, correction: Correction | None = None
) -> Estimate:
    """Seconds of generation and of the train step for one round of `cfg` with this shape
    (every parameter, the tied LM head included, multiplies every token)."""
    corr = correction or Correction()
    rows = cfg.questions_per_round * cfg.group_size
    steps = max(1.0, cfg.max_new_tokens * STEP_SHARE)
    tokens = rows * max(1.0, cfg.max_new_tokens * COMPLETION_SHARE)
    gen_s = gen_seconds(shape, cfg, rates, steps, tokens) * corr.gen
    prompt = min(cfg.max_prompt_tokens, PROMPT_TOKENS)
    groups = cfg.local_samples + cfg.external_samples
    train_tokens = groups * prompt + tokens * groups / cfg.questions_per_round
    train_s = train_seconds(shape, train_tokens, rates) * corr.train
    return Estimate(gen_s, train_s, corrected=corr.measured)


def gen_seconds(shape: Shape, cfg: Config, rates: Rates, steps: float, tokens: float) -> float:
    """Generation before any correction: every decode step reads all the weights once, and
    every generated token multiplies through them (rows leave the batch as they end, so the
    arithmetic follows the tokens, the memory traffic the steps); plus the prompts' prefill."""
    flops_token = 2.0 * shape.params
    prompt = min(cfg.max_prompt_tokens, PROMPT_TOKENS)
    weights = shape.params * rates.bytes_per_param / rates.bandwidth
    prefill = cfg.questions_per_round * prompt * flops_token / rates.gemm
    return (steps * weights + tokens * flops_token / rates.gemm + prefill) * OVERHEAD


def train_seconds(shape: Shape, tokens: float, rates: Rates) -> float:
    """Forward and backward to the inputs over `tokens` (before any correction)."""
    return 2.0 * tokens * 2.0 * shape.params / rates.gemm * OVERHEAD


# the rates and dtype a run of (model, its settings) would use on this machine
Speed = Callable[[str, Config], tuple[Rates, str]]


@dataclass(frozen=True)
class Choice:
    candidate: Candidate
    estimate: Estimate | None  # None where no estimate is made (a GPU)
    why: str
    over_target: bool = False  # none fitting was within the target: the fastest that fits


def choose(
    mem: Memory,
    device: str,
    rates: Rates | None,
    cache: PaceCache | None,
    *,
    target: float = ROUND_TARGET,
    available: Callable[[str], bool] = lambda _m: True,
    candidates: list[Candidate] = CANDIDATES,
    dtype: str = "float32",
    speed: Speed | None = None,
) -> Choice:
    """The first candidate whose model can be had, whose training fits 80% of the memory and
    whose round is estimated within `target` seconds; the fastest that fits when none is. Each
    round in the dtype a run of it would use: `speed(model, cfg)`'s (--dtype auto chooses per
    model), else `rates` in `dtype`. Without either (a GPU, or Apple's): the first that fits
    memory, as its paper round is quick."""
    skipped: list[str] = []
    fitting: list[tuple[Candidate, Estimate | None]] = []
    for cand in candidates:
        model = cand.settings["model"]
        shape = KNOWN.get(model)
        if shape is None:
            continue
        if not available(model):
            gone = f"{model} is not on this machine and the hub cannot be reached"
            if gone not in skipped:
                skipped.append(gone)
            continue
        cfg = cand.config()
        need = estimate_bytes(shape, cfg, device)
        if need > 0.8 * mem.total:
            skipped.append(f"{cand.label} needs ~{need / GB:.1f} GB")
            continue
        est = None
        if speed is not None or rates is not None:
            r, d = speed(model, cfg) if speed else (rates, dtype)
            est = estimate(shape, cfg, r, cache.correction(model, d) if cache else None)
        fitting.append((cand, est))
        if est is None or est.round_s <= target:
            return Choice(cand, est, _why(cand, est, target, skipped, mem))
    if not fitting:
        last = candidates[-1]
        return Choice(last, None, f"{last.label}: nothing else fits ({'; '.join(skipped)})")
    cand, est = min(fitting, key=lambda c: c[1].round_s if c[1] else 0.0)
    return Choice(cand, est, _why(cand, est, target, skipped, mem, over=True), over_target=True)


SLOW_FACTOR = 2.0  # a laptop whose class round is estimated past this x the target lightens it


def keep_pace(
    cfg: Config,
    rates: Rates,
    cache: PaceCache | None,
    *,
    small: str = SMALL_MODEL,
    dtype: str = "float32",
) -> tuple[Config, str | None]:
    """A student's laptop against the class's pace (cfg.round_target): when its round of the
    class's settings is estimated past SLOW_FACTOR x the target, the first of fewer questions
    (half, same model) and the small model on the class's task that comes back within that band;
    the lighter of the two when neither does. Returns the settings and a sentence for the
    student (None when the class's settings keep pace). The task, G, I/J ratio and reward stay
    the class's, so what this laptop shares is the class's kind of text. `rates` are in
    `dtype`, the one this laptop trains the class's model in (the small model is estimated in
    it too)."""
    name = model_name(cfg.model)  # a class's model carries the hub-only mark
    shape = KNOWN.get(MODEL_IDS.get(name, name))
    if shape is None:
        return cfg, None
    corr = cache.correction(name, dtype) if cache else None
    mine = estimate(shape, cfg, rates, corr)
    if mine.round_s <= SLOW_FACTOR * cfg.round_target:
        return cfg, None
    options: list[tuple[Config, Estimate, str]] = []
    fewer_q = max(1, cfg.questions_per_round // 2)
    if fewer_q < cfg.questions_per_round:
        i = min(cfg.local_samples, fewer_q)
        lighter = Config(**{**cfg.to_dict(), "questions_per_round": fewer_q, "local_samples": i})
        options.append(
            (lighter, estimate(shape, lighter, rates, corr), f"{fewer_q} questions a round")
        )
    if name != small and small in KNOWN:
        smaller = Config(**{**cfg.to_dict(), "model": hub_only(small)})
        corr_small = cache.correction(small, dtype) if cache else None
        options.append(
            (smaller, estimate(KNOWN[small], smaller, rates, corr_small), f"model {small}")
        )
    if not options:
        return cfg, None
    within = [o for o in options if o[1].round_s <= SLOW_FACTOR * cfg.round_target]
    new, est, what = within[0] if within else min(options, key=lambda o: o[1].round_s)
    return new, (
        f"this laptop would take ~{fmt_seconds(mine.round_s)} a round of the class's settings "
        f"(the class's pace: ~{fmt_seconds(cfg.round_target)}), so it trains with {what} "
        f"(~{fmt_seconds(est.round_s)} a round) and still shares its text with the class; "
        "join with --model to choose yourself"
    )


def _why(cand, est, target, skipped, mem, over: bool = False) -> str:
    parts = [cand.label]
    if est is not None:
        how = "measured here" if est.corrected else "estimated"
        parts.append(
            f"a round ~{fmt_seconds(est.round_s)} ({how}: generation ~{fmt_seconds(est.gen_s)}, "
            f"train step ~{fmt_seconds(est.train_s)})"
        )
        if over:
            parts.append(f"the fastest that fits; over the {fmt_seconds(target)} target")
        elif skipped or cand is not CANDIDATES[0]:
            parts.append(f"within the {fmt_seconds(target)} target")
    else:
        parts.append(f"fits {mem.total / GB:.0f} GB {mem.where}")
    if skipped:
        parts.append("skipped: " + "; ".join(skipped[:3]))
    return ", ".join(parts)


def fmt_seconds(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min"


def learn_from_round(cfg: Config, model_id: str, report: Any, cache: PaceCache, key: str) -> None:
    """After a real round: fold its phases' seconds into this machine's correction for the
    model in the key's dtype, when the rates under `key` (`rates_key`: dtype and threads) were
    measured here. Each phase against
    an estimate of the work the round actually did: its decode steps and generated tokens, the
    tokens its train step trained (a node alone trains its own groups only, zero-advantage
    completions are skipped), and the step only when it trained some."""
    model = known_model(model_id)
    shape, rates, dtype = KNOWN.get(model), cache.rates_saved(key), key.partition("/")[0]
    if shape is None or rates is None:
        return
    if report.gen_steps > 0 and report.gen_seconds > 0:
        done = gen_seconds(shape, cfg, rates, report.gen_steps, report.gen_tokens)
        cache.learn(model, dtype, "gen", report.gen_seconds, done)
    if report.train_tokens > 0 and report.train_seconds > 0:
        prompt = min(cfg.max_prompt_tokens, PROMPT_TOKENS)
        groups = report.local_used + report.external_used
        tokens = report.train_tokens + groups * prompt
        cache.learn(
            model, dtype, "train", report.train_seconds, train_seconds(shape, tokens, rates)
        )


def known_model(model_id: str) -> str:
    """The name KNOWN (and pace.json) uses for a model id: a class's hub mark dropped, an
    alias's hub id mapped to the alias."""
    name = model_name(model_id)
    return MODEL_IDS.get(name, name)
