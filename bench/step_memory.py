"""A train step's peak RSS above the resting process, and its seconds, with the gated MLP op
(backends/gated_mlp.py) and without it (the modeling code's MLP run by autograd), A/B.

    python bench/step_memory.py --model runs/bench/qwen2.5-0.5b-shape --rows 4 --pairs 2

Each measurement is its own process: the backend loads, one warm-up step of 2 rows allocates
the optimizer's state, the freed heap goes back to the OS, the peak (VmHWM) is reset, then one
step of `--rows` completions of `--tokens` random token ids (advantages +1/-1, so every row
trains) runs; peak above resting = VmHWM after the step - VmRSS before it. The modes take turns.
Linux only (VmHWM reset through /proc/self/clear_refs). Time it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workers import Spec, fixed_tasks, proc_mb, release_memory, reset_peak  # noqa: E402

MODES = ("gated", "plain")


def measure(model: str, mode: str, rows: int, tokens: int, dtype: str) -> dict:
    from sapo_edge.backends import load_backend, torch_loss
    from sapo_edge.backends.base import Completion, Sample
    from sapo_edge.rl.prompts import build_messages

    if mode == "plain":
        torch_loss.lean_gated_mlps = lambda *a, **k: nullcontext()
    spec = Spec(model_dir=model, model_id="step-memory", dtype=dtype)
    tasks = fixed_tasks(spec)
    backend = load_backend(Path(model), spec.config(), "mem", "cpu", lambda m: None, kind="torch")
    rng = random.Random(0)
    vocab = min(len(backend.tok), 40_000)

    def sample(k: int) -> Sample:
        ids = tuple(rng.randrange(100, vocab) for _ in range(tokens))
        return Sample(
            build_messages(tasks[k % len(tasks)].question),
            Completion("", ids, None),
            1.0 if k % 2 else -1.0,
        )

    samples = [sample(k) for k in range(rows)]
    backend.train_step(samples[:2])  # the optimizer's state, as after a round
    release_memory()
    rest = proc_mb()["VmRSS"]
    reset_peak()
    stats = backend.train_step(samples)
    peak = proc_mb()["VmHWM"]
    return {"mode": mode, "rest_mb": rest, "above_rest_mb": peak - rest, "step_s": stats.seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="runs/bench/qwen2.5-0.5b-shape", help="a model directory")
    ap.add_argument("--rows", type=int, default=4, help="completions in the measured step")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per completion")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--pairs", type=int, default=2, help="gated/plain pairs, taking turns")
    ap.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # a child: one measurement
    args = ap.parse_args(argv)
    if args.rows < 2 or args.tokens < 1 or args.pairs < 1:
        ap.error("--rows must be 2 or more, --tokens and --pairs 1 or more")
    if args.one:
        print(json.dumps(measure(args.model, args.one, args.rows, args.tokens, args.dtype)))
        return 0
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(args.pairs):
        for mode in MODES:
            cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
            out = subprocess.run([*cmd, "--one", mode], capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return out.returncode
            got = json.loads(out.stdout.strip().splitlines()[-1])
            runs[mode].append(got)
            print(json.dumps(got), flush=True)
    print(f"\n{args.model}: {args.rows} rows x {args.tokens} tokens, {args.dtype}")
    print("| MLP | step's peak above resting (MB) | step s | runs |\n|---|---:|---:|---:|")
    for mode in MODES:
        above = statistics.median(r["above_rest_mb"] for r in runs[mode])
        secs = statistics.median(r["step_s"] for r in runs[mode])
        print(f"| {mode} | {above:,.0f} | {secs:.1f} | {len(runs[mode])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
