"""Does a bfloat16 run learn like a float32 one? The same short demo (one node, one-digit addition,
lenient reward) in both dtypes, with the same seed and settings, side by side.

    nice -n 10 .venv/bin/python bench/bf16_learning.py [--rounds 24] [--out runs/bf16_learning]

Each dtype runs `sapo-edge sim --preset demo` as its own process with one torch thread (the two
take the machine's two cores), one node (no peers: J = 0, so nothing else differs), and the
settings below; then the two reward curves (mean reward of the node's own completions per round)
are printed side by side with their means over windows of rounds. Not part of `make test` (it
takes ~40 min on SmolLM2-135M on a shared 2-core machine); the figures are in docs/benchmarks-history.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DTYPES = ("float32", "bfloat16")


def sim_command(args, dtype: str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sapo_edge.cli",
        "sim",
        "--preset",
        "demo",
        "--model",
        args.model,
        "--nodes",
        "1",
        "--external-samples",
        "0",
        "--questions-per-round",
        str(args.questions),
        "--local-samples",
        str(args.questions),
        "--group-size",
        str(args.group_size),
        "--learning-rate",
        str(args.learning_rate),
        "--rounds",
        str(args.rounds),
        "--seed",
        str(args.seed),
        "--checkpoint-every",
        "0",
        "--no-resume",
        "--dtype",
        dtype,
        "--out-dir",
        str(out / dtype),
    ]


def curve(out: Path, dtype: str) -> list[dict]:
    [metrics] = (out / dtype).glob("*/metrics.jsonl")
    return [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--questions", type=int, default=4, help="questions (= groups) per round")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--learning-rate", type=float, default=2e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=int, default=5, help="rounds per averaged window")
    ap.add_argument("--out", type=Path, default=Path("runs/bf16_learning"))
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="print the curves of the rounds OUT already holds (a run still going, say)",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if not args.report_only:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        procs = {}
        for dtype in DTYPES:
            log = (args.out / f"{dtype}.log").open("w")
            procs[dtype] = subprocess.Popen(
                sim_command(args, dtype, args.out), stdout=log, stderr=subprocess.STDOUT, env=env
            )
        failed = [d for d, p in procs.items() if p.wait() != 0]
        if failed:
            print(f"failed: {', '.join(failed)}; see {args.out}/<dtype>.log", file=sys.stderr)
            return 1
    wall = time.time() - t0
    rows = {d: curve(args.out, d) for d in DTYPES}
    args.rounds = min(len(rows[d]) for d in DTYPES)  # a run still going: the rounds both have
    rows = {d: rows[d][: args.rounds] for d in DTYPES}
    took = "" if args.report_only else f", {wall / 60:.1f} min"
    print(f"{args.rounds} rounds{took}; mean reward of the node's own completions")
    print(f"{'round':>5} | " + " | ".join(f"{d:>9}" for d in DTYPES))
    for r in range(args.rounds):
        print(f"{r:>5} | " + " | ".join(f"{rows[d][r]['reward_mean']:>9.3f}" for d in DTYPES))
    print()
    w = args.window
    print(f"{'rounds':>9} | " + " | ".join(f"{d:>9}" for d in DTYPES))
    for start in range(0, args.rounds, w):
        cells = [
            statistics.fmean(x["reward_mean"] for x in rows[d][start : start + w]) for d in DTYPES
        ]
        label = f"{start}-{min(start + w, args.rounds) - 1}"
        print(f"{label:>9} | " + " | ".join(f"{c:>9.3f}" for c in cells))
    for d in DTYPES:
        secs = statistics.median(x["round_seconds"] for x in rows[d])
        print(f"{d}: median round {secs:.1f} s, peak RSS {rows[d][-1]['peak_rss_mb']:,.0f} MB")
    summary = {d: [x["reward_mean"] for x in rows[d]] for d in DTYPES}
    (args.out / "curves.json").write_text(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
