"""A/B of the torch decode loop in one process: the old loop (DynamicCache, torch.multinomial,
peft's unmerged LoRA) against the current one (torch_decode.py), taking turns, with generate()'s
GEMM floor measured after each run.

    OMP_NUM_THREADS=1 python bench/decode_ab.py [--max-new-tokens 64] [--reps 2] [--dtype float32]

The same 4 reasoning-gym prompts x 8 completions as bench/vs_trl.py; LoRA B is drawn non-zero so
the adapter matters. Prints tokens/s per run, each run's ratio to its floor, and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workers import Spec, decode_floor, fixed_tasks  # noqa: E402

from sapo_edge.backends import (  # noqa: E402
    load_backend,  # noqa: E402
    torch_backend,
    torch_decode,
)
from sapo_edge.models import resolve_model  # noqa: E402
from sapo_edge.prompts import build_messages  # noqa: E402


def old_sample(logits: torch.Tensor, top_p: float, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(1)


def use(backend, new: bool) -> None:
    """Point the backend at the new decode helpers, or at the ones they replaced."""
    from transformers import DynamicCache

    backend.fuse_lora = new
    torch_backend.sample = torch_decode.sample if new else old_sample
    torch_backend.growing_cache = (
        torch_decode.growing_cache if new else (lambda config, cap: DynamicCache(config=config))
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = ap.parse_args()
    model = resolve_model(a.model, progress=print)
    spec = Spec(model_dir=str(model.path), dtype=a.dtype, max_new_tokens=a.max_new_tokens)
    prompts = [build_messages(t.question) for t in fixed_tasks(spec)]
    b = load_backend(model.path, spec.config(), "ab", "cpu", print, kind="torch")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in b.params:
            p.normal_(0.0, 0.01)
    rates: dict[str, list[float]] = {"old": [], "new": []}
    for rep in range(a.reps):
        for name in rates:
            use(b, name == "new")
            t0 = time.perf_counter()
            groups = b.generate(
                prompts,
                spec.group_size,
                max_new_tokens=a.max_new_tokens,
                temperature=1.0,
                top_p=1.0,
                seed=rep,
            )
            seconds = time.perf_counter() - t0
            tokens = sum(c.tokens for grp in groups for c in grp)
            floor = decode_floor(b, prompts, groups)
            rates[name].append(tokens / seconds)
            print(
                f"rep {rep} {name}: {tokens} tokens in {seconds:.1f} s, {tokens / seconds:.1f} "
                f"tokens/s; GEMM floor {floor['seconds']:.1f} s "
                f"({floor['gflops_per_s']:.0f} GFLOP/s): {seconds / floor['seconds']:.2f}x",
                flush=True,
            )
    old, new = (statistics.median(rates[k]) for k in ("old", "new"))
    print(f"median tokens/s: old {old:.1f}, new {new:.1f}; new / old {new / old:.2f}x")


if __name__ == "__main__":
    main()
