"""A/B of the torch decode loop in one process, the variants taking turns, with generate()'s
GEMM floors measured after each run.

    OMP_NUM_THREADS=1 python bench/decode_ab.py [--max-new-tokens 64] [--reps 2] [--dtype float32]
        [--variants old,v1,now]

Variants (each the current code with some helpers swapped back):
- old: before issue 15 (DynamicCache, torch.multinomial, peft's unmerged LoRA), and v1's parts;
- v1: issue 15's first pass (a prefill through the LM head, the cache compacted whole, bfloat16
  LoRA with A and B cast to bfloat16, a float64 cumulative sum over the whole vocabulary), and
  v2's parts;
- v2: before issue 33's cache work (key/value heads copied for each query head before attention,
  transformers' repeat_kv; the KV cache allocated for the whole call's plan at the start);
- now: the current loop (the same tokens as v2, bit for bit).

The same 4 prompts x 8 completions as bench/vs_trl.py; LoRA B is drawn non-zero so the adapter
matters. Prints tokens/s per run and each run's ratio to both floors (workers.decode_floor: the
model's own weights streamed layer after layer, and the older one-weight-per-shape floor whose
weights stay in the CPU cache), then the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workers import Spec, decode_floor, fixed_tasks, generate_round  # noqa: E402

from sapo_edge.backends import (  # noqa: E402
    attention_kernels,
    load_backend,  # noqa: E402
    torch_backend,
    torch_decode,
)
from sapo_edge.models.resolve import resolve_model  # noqa: E402
from sapo_edge.rl.prompts import build_messages  # noqa: E402


def old_sample(logits: torch.Tensor, top_p: float, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(1)


def v1_sample(logits: torch.Tensor, top_p: float, gen: torch.Generator) -> torch.Tensor:
    return torch_decode.inverse_cdf(torch.softmax(logits, -1), gen)  # over the whole vocabulary


def v1_prefill(self, ids, mask, pos, cache) -> None:
    self.model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        **torch_decode.kv_cache(self.lm, cache),
        logits_to_keep=1,
    )


def v1_copy(self, buf: torch.Tensor, rows: torch.Tensor, capacity: int) -> torch.Tensor:
    if capacity != buf.shape[2]:  # growing: as now
        return CURRENT["copy"](self, buf, rows, capacity)
    return buf[rows]  # rows kept or repeated: the whole buffer, margin included


class V1LeanLora(torch_decode.LeanLora):
    def __init__(self, base, a, b, scale):
        dtype = base.weight.dtype
        super().__init__(base, a.to(dtype), b.to(dtype), scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(x, self.a), self.b) * self.scale


CURRENT = {
    "prefill": torch_backend.TorchBackend._prefill,
    "copy": torch_decode._GrowingLayer._copy,
    "lean": torch_decode.LeanLora,
    "sample": torch_decode.sample,
    "cache": torch_decode.growing_cache,
    "room": torch_decode._GrowingLayer._room,
}


def v2_room(self, end: int) -> int:
    return max(end, self.capacity)  # the whole plan


def use(backend, variant: str) -> None:
    """Point the backend at the current decode helpers, or at the ones they replaced."""
    from transformers import DynamicCache

    now, old = variant == "now", variant == "old"
    late = now or variant == "v2"  # issue 15's helpers as they ended
    backend.fuse_lora = not old
    torch_backend.sample = old_sample if old else CURRENT["sample"] if late else v1_sample
    torch_backend.growing_cache = (
        (lambda config, cap: DynamicCache(config=config)) if old else CURRENT["cache"]
    )
    torch_backend.TorchBackend._prefill = CURRENT["prefill"] if late else v1_prefill
    torch_decode._GrowingLayer._copy = CURRENT["copy"] if late else v1_copy
    torch_decode.LeanLora = CURRENT["lean"] if late else V1LeanLora
    os.environ[attention_kernels.GQA_SWITCH] = "1" if now else "0"
    torch_decode._GrowingLayer._room = CURRENT["room"] if now else v2_room


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--variants", default="v1,now", help="comma-separated, of old, v1, v2, now")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model = resolve_model(a.model, progress=print)
    spec = Spec(model_dir=str(model.path), dtype=a.dtype, max_new_tokens=a.max_new_tokens)
    prompts = [build_messages(t.question) for t in fixed_tasks(spec)]
    b = load_backend(model.path, spec.config(), "ab", "cpu", print, kind="torch")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in b.params:
            p.normal_(0.0, 0.01)
    variants = a.variants.split(",")
    rates: dict[str, list[float]] = {v: [] for v in variants}
    floors: dict[str, list[float]] = {v: [] for v in variants}
    hot: dict[str, list[float]] = {v: [] for v in variants}
    for rep in range(a.reps):
        for name in variants:
            use(b, name)
            t0 = time.perf_counter()
            groups = generate_round(b, spec, prompts, seed=rep)
            seconds = time.perf_counter() - t0
            tokens = sum(c.tokens for grp in groups for c in grp)
            floor = decode_floor(b, prompts, groups)
            rates[name].append(tokens / seconds)
            floors[name].append(seconds / floor["seconds"])
            hot[name].append(seconds / floor["hot_seconds"])
            print(
                f"rep {rep} {name}: {tokens} tokens in {seconds:.1f} s, {tokens / seconds:.1f} "
                f"tokens/s; streamed GEMM floor {floor['seconds']:.1f} s "
                f"({floor['gflops_per_s']:.0f} GFLOP/s): {floors[name][-1]:.2f}x; cache-hot "
                f"floor {floor['hot_seconds']:.1f} s: {hot[name][-1]:.2f}x",
                flush=True,
            )
    med = {v: statistics.median(rates[v]) for v in variants}
    print(f"medians ({a.dtype}, {a.reps} runs each, {a.max_new_tokens} tokens):")
    for v in variants:
        print(
            f"  {v}: {med[v]:.1f} tokens/s ({med[v] / med[variants[0]]:.2f}x {variants[0]}); "
            f"{statistics.median(floors[v]):.2f}x the streamed floor, "
            f"{statistics.median(hot[v]):.2f}x the cache-hot floor"
        )


if __name__ == "__main__":
    main()
