"""Benchmark (not a test): generation tokens/s and seconds per GRPO step, MLX vs torch, same config.

Usage: `python bench/bench_backends.py [--model smollm2-135m] [--prompts 2] [--group-size 4]
[--max-new-tokens 32] [--steps 2]`. Both backends run in this one process, torch first.

`--mlx-prefix-ab` instead times MLX generation with prefix sharing off and on, taking turns
--steps times in this one process (the same prompts, seeds and sampled tokens both ways).
"""

from __future__ import annotations

import argparse
import statistics
import time

from sapo_edge.backends import load_backend, select_backend
from sapo_edge.backends.base import Sample
from sapo_edge.config.settings import Config
from sapo_edge.models.resolve import resolve_model
from sapo_edge.rl.prompts import build_messages

QUESTIONS = [
    "Calculate 37 + 85.",
    "What is 12 * 7? Explain briefly.",
    "How many letters are in the word 'swarm'?",
    "Sort these numbers ascending: 9, 2, 7, 4.",
    "Calculate 144 / 12 - 3.",
    "What is the next number: 2, 4, 8, 16, ?",
    "Reverse the word 'policy'.",
    "Calculate (5 + 3) * 2.",
]


def bench_generate(backend, prompts, cfg: Config) -> tuple[dict[str, float], list[Sample]]:
    gen = dict(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)
    backend.generate(prompts[:1], 2, **{**gen, "max_new_tokens": 4}, seed=0)  # warm-up
    t0 = time.perf_counter()
    groups = backend.generate(prompts, cfg.group_size, **gen, seed=1)
    seconds = time.perf_counter() - t0
    tokens = sum(g.tokens for grp in groups for g in grp)
    samples = [
        Sample(p, g, 1.0 if i % 2 == 0 else -1.0)
        for p, grp in zip(prompts, groups, strict=True)
        for i, g in enumerate(grp)
    ]
    return {"gen_tokens": tokens, "gen_s": seconds, "tok_per_s": tokens / seconds}, samples


def bench_step(backend, samples: list[Sample], steps: int) -> dict[str, float]:
    backend.train_step(samples)  # warm-up (the first step builds the optimizer state)
    stats = [backend.train_step(samples) for _ in range(steps)]
    return {"step_s": statistics.median(s.seconds for s in stats), "step_tokens": stats[0].tokens}


def mlx_prefix_ab(model, cfg: Config, prompts, reps: int) -> None:
    kind, device = select_backend("mlx", log=print)
    backend = load_backend(model.path, cfg, "bench-mlx", device, print, kind=kind)
    gen = dict(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)
    backend.generate(prompts[:1], 2, **{**gen, "max_new_tokens": 4}, seed=0)  # warm-up
    rates: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(reps):
        for share in (False, True):
            backend.share_prefix = share
            t0 = time.perf_counter()
            groups = backend.generate(prompts, cfg.group_size, **gen, seed=rep)
            seconds = time.perf_counter() - t0
            tokens = sum(g.tokens for grp in groups for g in grp)
            rates[share].append(tokens / seconds)
            print(
                f"MLX on {device}, prefix sharing {'on ' if share else 'off'}: "
                f"{tokens} tokens in {seconds:.1f} s, {tokens / seconds:.1f} tokens/s"
            )
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median tokens/s: off {off:.1f}, on {on:.1f}; on / off {on / off:.2f}x")
    backend.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--mlx-prefix-ab", action="store_true", help="MLX prefix sharing off vs on")
    a = ap.parse_args()
    cfg = Config(
        model=a.model,
        dtype="float32",
        questions_per_round=a.prompts,
        local_samples=min(4, a.prompts),
        group_size=a.group_size,
        max_new_tokens=a.max_new_tokens,
        micro_batch_size=a.micro_batch_size,
    )
    model = resolve_model(a.model, progress=lambda m: None)
    print(
        f"model {model.model_id}; {a.prompts} prompts x {a.group_size} completions, up to "
        f"{a.max_new_tokens} new tokens; GRPO step over all {a.prompts * a.group_size} "
        f"completions, micro-batch {a.micro_batch_size}, LoRA r={cfg.lora_r} on "
        f"{len(cfg.lora_targets)} projections, float32; median of {a.steps} steps"
    )
    prompts = [build_messages(q) for q in (QUESTIONS * 8)[: a.prompts]]
    if a.mlx_prefix_ab:
        return mlx_prefix_ab(model, cfg, prompts, a.steps)
    backends, results, samples = {}, {}, None
    for choice in ("cpu", "mlx"):
        kind, device = select_backend(choice, log=print)
        backends[kind] = load_backend(model.path, cfg, f"bench-{kind}", device, print, kind=kind)
        results[kind], generated = bench_generate(backends[kind], prompts, cfg)
        samples = samples or generated  # both backends train on torch's completions
    for kind, backend in backends.items():
        results[kind].update(bench_step(backend, samples, a.steps))
        backend.close()
    print(
        f"{'backend':<8} {'gen tokens':>10} {'gen s':>8} {'tokens/s':>9} {'step tokens':>11} {'s/step':>8}"
    )
    for kind, r in results.items():
        print(
            f"{kind:<8} {r['gen_tokens']:>10} {r['gen_s']:>8.2f} {r['tok_per_s']:>9.1f}"
            f" {r['step_tokens']:>11} {r['step_s']:>8.2f}"
        )
    t, m = results["torch"], results["mlx"]
    print(
        f"MLX / torch: generation tokens/s {m['tok_per_s'] / t['tok_per_s']:.2f}x, "
        f"seconds per GRPO step {m['step_s'] / t['step_s']:.2f}x (above 1: MLX is slower)"
    )


if __name__ == "__main__":
    main()
