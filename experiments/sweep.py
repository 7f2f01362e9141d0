"""SAPO's local/external sweep at laptop scale: one command, from a clean checkout.

    .venv/bin/python experiments/sweep.py            # run + held-out eval + report (~80 min)

Runs `sapo-edge sim` (runner.run_sim) once per split of the 8 training groups per round (8/0,
6/2, 4/4, 2/6: I local + J external), each with the same nodes, model, seeds and questions
(experiments/sweep.toml), then scores every node's final adapter and the base model on the same
held-out questions, then writes the table and plots (experiments/report.py).

The splits run in parallel lanes (default 2, one torch thread each): on this 2-core machine two
single-threaded processes get through ~20% more work than one process with two threads. A
killed sweep picks up where it stopped (each sim resumes from its newest checkpoint; finished
evaluations are kept). Outputs land in runs/sweep/ (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from report import SPLITS, split_dir, write_report  # noqa: E402


def split_config(config: Path, out: Path, split: str):
    from sapo_edge.config.settings import Config

    i, j = (int(x) for x in split.split("/"))
    overrides = {
        "local_samples": i,
        "external_samples": j,
        "out_dir": str(split_dir(out, split)),
        "resume": True,
    }
    return Config.load(config, overrides)


def lane_worker(args: argparse.Namespace) -> None:
    """One lane: its splits' sims one after another, then their held-out evaluations."""
    import torch

    from sapo_edge.run.evaluate import evaluate
    from sapo_edge.run.runner import run_sim

    torch.set_num_threads(args.threads)
    splits = args.lane.split(",")
    if "run" in args.stages:
        for split in splits:
            t0 = time.time()
            run_sim(split_config(args.config, args.out, split))
            _write_json(split_dir(args.out, split) / "sim_seconds.json", time.time() - t0)
    if "eval" not in args.stages:
        return
    jobs = [(split, f"{args.name}-{n}") for split in splits for n in range(args.nodes)]
    if args.base_eval:
        jobs.insert(0, ("base", ""))
    for split, node in jobs:
        target = (
            args.out / "eval-base.json"
            if split == "base"
            else split_dir(args.out, split) / f"eval-{node}.json"
        )
        if target.is_file():
            continue
        cfg = split_config(args.config, args.out, "8/0" if split == "base" else split)
        checkpoint = "" if split == "base" else str(Path(cfg.out_dir) / node)
        samples = args.eval_samples * (args.nodes if split == "base" else 1)
        r = evaluate(cfg, questions=args.eval_questions, samples=samples, checkpoint=checkpoint)
        print(r.table(), flush=True)
        _write_json(
            target,
            {
                "pass_at_1": r.pass_at_1,
                "questions": r.questions,
                "samples": r.samples,
                "source": r.source,
            },
        )


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=HERE / "sweep.toml")
    ap.add_argument("--out", type=Path, default=Path("runs/sweep"))
    ap.add_argument("--splits", default=",".join(SPLITS), help="comma-separated I/J splits")
    ap.add_argument("--lanes", type=int, default=2, help="parallel processes (default 2)")
    ap.add_argument("--eval-questions", type=int, default=32, help="held-out questions (32)")
    ap.add_argument(
        "--eval-samples", type=int, default=2, help="completions per question per node (2)"
    )
    ap.add_argument("--stages", default="run,eval,report", help="run,eval,report (all)")
    ap.add_argument("--docs", type=Path, default=Path("docs"), help="where the report goes")
    ap.add_argument("--lane", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--base-eval", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.stages = set(args.stages.split(","))
    if not args.stages <= {"run", "eval", "report"}:
        ap.error(f"--stages {','.join(sorted(args.stages))}: use run, eval and/or report")
    cfg = split_config(args.config, args.out, "8/0")  # a bad config fails here, before any lane
    args.nodes, args.name = cfg.nodes, cfg.name
    if args.lane:
        lane_worker(args)
        return 0
    splits = args.splits.split(",")
    if bad := [s for s in splits if s.count("/") != 1 or not s.replace("/", "").isdigit()]:
        ap.error(f"--splits: {bad[0]!r} is not I/J (for example 4/4)")
    if args.stages & {"run", "eval"}:
        _run_lanes(args, splits)
    if "report" in args.stages:
        write_report(args.out, splits, args.config, args.docs)
    return 0


def _run_lanes(args: argparse.Namespace, splits: list[str]) -> None:
    lanes = [splits[i :: args.lanes] for i in range(args.lanes) if splits[i :: args.lanes]]
    threads = max(1, (os.cpu_count() or 1) // len(lanes))
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    procs = []
    for k, lane in enumerate(lanes):
        cmd = [
            sys.executable,
            __file__,
            "--config",
            str(args.config),
            "--out",
            str(args.out),
            "--stages",
            ",".join(sorted(args.stages - {"report"})),
            "--eval-questions",
            str(args.eval_questions),
            "--eval-samples",
            str(args.eval_samples),
            "--lane",
            ",".join(lane),
            "--threads",
            str(threads),
        ] + (["--base-eval"] if k == len(lanes) - 1 else [])
        log = (args.out / f"lane-{k}.log").open("a")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        print(f"lane {k}: {', '.join(lane)} ({threads} thread(s)), log {log.name}", flush=True)
    codes = [p.wait() for p in procs]
    _write_json(args.out / "wall_seconds.json", time.time() - t0)
    if any(codes):
        raise SystemExit(f"a lane failed (exit codes {codes}): see {args.out}/lane-*.log")
    print(f"sweep runs and evaluations done in {(time.time() - t0) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    sys.exit(main())
