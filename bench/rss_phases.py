"""Peak RSS of each phase of a sapo-edge round on the head-to-head's work (bench/workers.py: SmolLM2,
4 one-digit additions x G=8, up to 128 tokens, the torch backend), to see where the memory goes.

    python bench/rss_phases.py --dtype float32 --rounds 2      # the defaults
    python bench/rss_phases.py --micro-batch 4 --merged        # near the older defaults

(The older defaults also ran the prompt once per micro-batch and kept the step's freed memory
in glibc's heap; shared_prefix.py and heap.py now do neither, whatever the flags.)

Linux only: the process's peak (VmHWM) is reset between phases by writing 5 to
/proc/self/clear_refs. Setting MALLOC_MMAP_THRESHOLD_ in the environment turns heap.py off.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workers import (  # noqa: E402
    Spec,
    fixed_tasks,
    generate_round,
    page_in,
    proc_mb,
    release_memory,
    reset_peak,
    scored_samples,
)

from sapo_edge.rl.prompts import build_messages  # noqa: E402


def rss_mb() -> dict[str, int]:
    """Current (VmRSS) and peak-since-reset (VmHWM) resident memory, in whole MB."""
    return {k: int(v) for k, v in proc_mb().items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--micro-batch", type=int, default=0, help="0 = auto (1 on the CPU)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny shapes (CI): 2 questions x 2, 8 tokens"
    )
    ap.add_argument(
        "--stand-in-rewards",
        action="store_true",
        help="workers.stand_in_reward for every completion (a random model, e.g. "
        "runs/bench/qwen2.5-0.5b-shape, earns none: every completion then trains)",
    )
    ap.add_argument(
        "--trim", action="store_true", help="hand freed heap back to the OS after each phase"
    )
    ap.add_argument(
        "--merged",
        action="store_true",
        help="float32 LoRA merged into a copy of the weights while sampling (the older default)",
    )
    args = ap.parse_args(argv)

    from sapo_edge.backends import load_backend
    from sapo_edge.models.resolve import resolve_model

    model = resolve_model(args.model, progress=print)
    spec = Spec(model_dir=str(model.path), model_id=model.model_id, dtype=args.dtype)
    spec.stand_in_rewards = args.stand_in_rewards
    if args.smoke:
        spec.questions, spec.group_size, spec.max_new_tokens = 2, 2, 8
    cfg = spec.config(micro_batch_size=args.micro_batch)
    tasks = fixed_tasks(spec)
    prompts = [build_messages(t.question) for t in tasks]
    backend = load_backend(Path(spec.model_dir), cfg, "rss", "cpu", print, kind="torch")
    backend.lean_lora = not args.merged
    page_in(backend.model)  # the resting floor holds every weight (workers.ready)
    print(f"load: {rss_mb()}")
    release_memory()
    reset_peak()

    def phase_done(r: int, what: str) -> None:
        print(f"round {r} {what}: {rss_mb()}")
        if args.trim:
            release_memory()
            print(f"round {r} trimmed: {rss_mb()}")
        reset_peak()

    for r in range(args.rounds):
        t0 = time.perf_counter()
        groups = generate_round(backend, spec, prompts, seed=r)
        phase_done(r, f"generation {time.perf_counter() - t0:.1f} s")
        samples, _ = scored_samples(tasks, prompts, groups, spec.stand_in_rewards)
        stats = backend.train_step(samples)
        rows = sum(s.advantage != 0 for s in samples)
        phase_done(r, f"step {stats.seconds:.1f} s, {rows} rows, {stats.tokens} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
