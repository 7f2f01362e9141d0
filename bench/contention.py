"""Seconds per round with k busy programs beside training: today's fixed thread count against
the adaptive policy (sapo_edge/machine/threads.py), in one run on one machine.

Each cell is a real `sapo-edge run --headless --solo` (SmolLM2-135M on one-digit addition by
default) in its own process, with k processes spinning `while True: pass` started before it and
killed after it. A cell reports the median of its rounds' seconds (metrics.jsonl) after the
first round (model warm-up); a cell that runs past --cell-timeout reports what it finished.

    python bench/contention.py --busy 0,1 --rounds 3            # the issue-27 table
    python bench/contention.py --modes fixed,adaptive,one,passive --busy 0,1,2

Modes: `fixed` pins --threads to the usable cores (torch's default: the behaviour before the
adaptive policy), `adaptive` is --threads 0, `one` pins 1 thread, `passive` is fixed with
OMP_WAIT_POLICY=PASSIVE (threads sleep instead of spinning while they wait). Run it on a quiet
machine and name the CPU beside the figures (`grep -o 'amx_bf16\\|avx512_bf16' /proc/cpuinfo`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sapo_edge.machine.threads import usable_cores  # noqa: E402

BUSY = "while True: pass"


def cell(args, mode: str, busy: int, out: Path) -> dict:
    cores = usable_cores()
    threads = {"fixed": cores, "adaptive": 0, "one": 1, "passive": cores}[mode]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if mode == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    cmd = [
        sys.executable, "-c", "import sys; from sapo_edge.cli import main; sys.exit(main())", "run", "--headless", "--solo",
        "--preset", args.preset, "--model", args.model, "--rounds", str(args.rounds),
        "--threads", str(threads), "--seed", "0", "--out-dir", str(out),
    ]  # fmt: skip
    loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    t0 = time.perf_counter()
    try:
        run = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=args.cell_timeout
        )
        ok = run.returncode == 0
        tail = (run.stdout + run.stderr)[-400:]
    except subprocess.TimeoutExpired:
        ok, tail = False, "timed out"
    finally:
        for p in loops:
            p.kill()
            p.wait()
    metrics = out / args.name / "metrics.jsonl"
    rows = (
        [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        if metrics.exists()
        else []
    )
    seconds = [r["round_seconds"] for r in rows]
    after_first = seconds[1:] or seconds
    return {
        "mode": mode,
        "busy": busy,
        "rounds": len(seconds),
        "median_s": statistics.median(after_first) if after_first else None,
        "all_s": [round(s, 1) for s in seconds],
        "rewards": [round(r["reward_mean"], 3) for r in rows],
        "wall_s": round(time.perf_counter() - t0, 1),
        "finished": ok,
        "tail": "" if ok else tail,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", default="0,1", help="busy-program counts, comma-separated")
    ap.add_argument("--modes", default="fixed,adaptive")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--preset", default="addition")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--name", default="node")
    ap.add_argument("--cell-timeout", type=float, default=900.0)
    ap.add_argument("--json", help="also write the cells here")
    args = ap.parse_args()
    cells = []
    tmp = Path(tempfile.mkdtemp(prefix="contention-"))
    try:
        for busy in [int(x) for x in args.busy.split(",")]:
            for mode in args.modes.split(","):
                c = cell(args, mode, busy, tmp / f"{mode}-{busy}")
                cells.append(c)
                print(json.dumps(c), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    quiet = {c["mode"]: c["median_s"] for c in cells if c["busy"] == 0}
    base = quiet.get("fixed")
    print(f"\n{usable_cores()} usable cores; seconds per round (median after the first round)")
    print("| busy programs | mode | s/round | x quiet fixed | x own quiet | rounds (s) |")
    print("|---|---|---|---|---|---|")
    for c in cells:
        s = c["median_s"]
        vs = f"{s / base:.2f}x" if s and base else "-"
        own = quiet.get(c["mode"])
        vs_own = f"{s / own:.2f}x" if s and own else "-"
        text = f"{s:.1f}" if s else "-"
        if not c["finished"]:
            text += " (cut)"
        print(f"| {c['busy']} | {c['mode']} | {text} | {vs} | {vs_own} | {c['all_s']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(cells, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
