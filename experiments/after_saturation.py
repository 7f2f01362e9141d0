"""After saturation: what training on peers does to a swarm that has stopped learning alone.

    .venv/bin/python experiments/after_saturation.py --from runs/evidence/v3/seed-0/8-0

Every arm starts from the same finished 8/0 cell (its nodes' newest checkpoints: a swarm whose
own groups are all alike, so 8/0 trains nothing more) and runs --rounds more rounds of that
cell's own settings (its config.json: seed, task, model, dtype) with the arm's mix; then every
node answers the held-out questions of the evidence cells
(node k: held-out seed k, the same count), so the starting cell's held-out pass@1 is each arm's
"before". Arms: 4/4 (the paper's: peers' right and wrong answers) and 4/4-no-negatives
(external_negatives = false: the peers' completions with a negative advantage trained at
advantage 0). The arms run side by side, one process and one thread each. Each writes
docs/<label>/<arm>-<rounds>-rounds.json and .md; a cut run resumes from its checkpoints
(runs/<label>/<arm>), a finished arm is skipped, and a larger --rounds goes on from where the arm
stopped (its held-out evaluation is redone). One --label holds one starting cell.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from evidence import (  # noqa: E402
    _metrics,
    _write_json,
    code_version,
    evaluate_nodes,
    heldout_per_node,
)

ARMS = {
    "4-4": {"local_samples": 4, "external_samples": 4, "external_negatives": True},
    "4-4-no-negatives": {"local_samples": 4, "external_samples": 4, "external_negatives": False},
}
FROM = "from.txt"  # in an arm's run folder: the cell it started from


def seed_arm(source: Path, out: Path) -> int:
    """Copy each node's newest checkpoint and its metrics into out (once); the start round."""
    from sapo_edge.rl.checkpoints import find_latest

    marker = out / FROM
    if marker.is_file() and marker.read_text(encoding="utf-8") != str(source.resolve()):
        raise SystemExit(
            f"{out} started from {marker.read_text(encoding='utf-8')}, not {source}: "
            "pass another --label for another starting cell."
        )
    start = None
    for node in sorted(p for p in source.iterdir() if (p / "checkpoints").is_dir()):
        found = find_latest(node / "checkpoints", print)
        if found is None:
            raise SystemExit(f"{node}: no complete checkpoint; pass a finished cell's folder.")
        rnd = int(found.state["round"])
        if start not in (None, rnd):
            raise SystemExit(f"{source}: its nodes stopped at different rounds; finish the cell.")
        start = rnd
        dest = out / node.name
        if not dest.exists():
            tmp = out / f".{node.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(found.path, tmp / "checkpoints" / found.path.name)
            shutil.copy2(node / "metrics.jsonl", tmp / "metrics.jsonl")
            tmp.rename(dest)
    if start is None:
        raise SystemExit(f"{source}: no node folders with checkpoints.")
    marker.write_text(str(source.resolve()), encoding="utf-8")
    return start


def summary_path(args: argparse.Namespace, arm: str) -> Path:
    return args.docs / args.label / f"{arm}-{args.rounds}-rounds.json"


def run_arm(args: argparse.Namespace, arm: str) -> dict:
    import torch

    from sapo_edge.config.settings import Config
    from sapo_edge.run.runner import run_sim

    torch.set_num_threads(1)
    out = args.out / args.label / arm
    out.mkdir(parents=True, exist_ok=True)
    start = seed_arm(args.source, out)
    first = min(p for p in args.source.iterdir() if (p / "config.json").is_file())
    saved = json.loads((first / "config.json").read_text(encoding="utf-8"))
    overrides = {
        "resume": True,
        "rounds": start + args.rounds,
        "checkpoint_every": 1,
        "out_dir": str(out),
        "mix": "fixed",
        "external_sampling": "uniform",
        **ARMS[arm],
    }
    cfg = Config.from_dict({**saved, **overrides}, source=str(first / "config.json"))
    names = [f"{cfg.name}-{k}" for k in range(cfg.nodes)]
    t0 = time.time()
    nodes = run_sim(cfg)
    sim_seconds = time.time() - t0
    if any(n.round != cfg.rounds for n in nodes):
        raise SystemExit(
            f"{out}: its nodes are at rounds {[n.round for n in nodes]}, not {cfg.rounds}: "
            "--rounds is smaller than what this arm already ran; pass at least that many."
        )
    per_node = args.heldout_per_node or heldout_per_node(cfg.nodes)
    heldout = evaluate_nodes(cfg, out, names, per_node, True, f"-round-{start + args.rounds}")
    metrics = {n: _metrics(out / n / "metrics.jsonl")[start:] for n in names}
    return {
        "label": args.label,
        "arm": arm,
        "from": str(args.source),
        "start_round": start,
        "rounds": args.rounds,
        "config": {
            k: cfg.to_saved_dict()[k]
            for k in ("local_samples", "external_samples", "external_negatives", "dtype", "seed")
        },
        "rewards": {n: [m["reward_mean"] for m in ms] for n, ms in metrics.items()},
        "external_used": {n: [m["external_used"] for m in ms] for n, ms in metrics.items()},
        "local_used": {n: [m["local_used"] for m in ms] for n, ms in metrics.items()},
        "heldout": heldout,
        "sim_seconds": sim_seconds,
        "code": args.code,
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def arm_table(s: dict) -> str:
    lines = [
        f"# {s['label']}: {s['arm']}, rounds {s['start_round']}-{s['start_round'] + s['rounds'] - 1}"
        f" from {s['from']}",
        "",
        "| node | reward per round | peer groups trained | own groups trained | held-out pass@1 |",
        "|---|---|---|---|---|",
    ]
    for n, rs in s["rewards"].items():
        lines.append(
            f"| {n} | {' '.join(f'{r:.2f}' for r in rs)} | {sum(s['external_used'][n])} | "
            f"{sum(s['local_used'][n])} | {s['heldout']['per_node'][n]['pass_at_1']:.3f} |"
        )
    h = s["heldout"]
    lines += [
        "",
        f"Held-out pass@1 {h['pass_at_1']:.3f} (SE {h['se']:.4f}, {h['completions']} completions)."
        f" Code {s['code']}, finished {s['finished']}; sim {s['sim_seconds'] / 60:.1f} min.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--from",
        dest="source",
        type=Path,
        required=True,
        help="a finished 8/0 cell's run folder (runs/evidence/<label>/seed-S/8-0)",
    )
    ap.add_argument("--label", default="after-saturation")
    ap.add_argument("--rounds", type=int, default=16, help="rounds to add (16)")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"of {', '.join(ARMS)}")
    ap.add_argument(
        "--heldout-per-node", type=int, default=0, help="held-out questions per node (the cells')"
    )
    ap.add_argument("--out", type=Path, default=HERE.parent / "runs")
    ap.add_argument("--docs", type=Path, default=HERE.parent / "docs")
    ap.add_argument("--arm", help=argparse.SUPPRESS)  # one arm, in a child process
    ap.add_argument("--code", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.arm:
        summary = run_arm(args, args.arm)
        path = summary_path(args, args.arm)
        _write_json(path, summary)
        path.with_suffix(".md").write_text(arm_table(summary), encoding="utf-8")
        print(f"arm done: {path}", flush=True)
        return
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}: use {', '.join(ARMS)}.")
    if not args.source.is_dir() or not any(args.source.glob("*/config.json")):
        raise SystemExit(f"--from {args.source}: no node folders there (sweep-0, ...).")
    todo = [a for a in arms if not summary_path(args, a).is_file()]
    code = code_version()
    procs = []
    for arm in todo:
        log = args.out / args.label / f"{arm}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, __file__, *argv, "--arm", arm, "--code", code]
        procs.append(subprocess.Popen(cmd, stdout=log.open("a"), stderr=subprocess.STDOUT))
    print(f"{len(procs)} arm(s) running; logs in {args.out / args.label}/", flush=True)
    failed = [p.args for p in procs if p.wait() != 0]
    if failed:
        raise SystemExit(f"{len(failed)} arm(s) failed: see their logs.")


if __name__ == "__main__":
    main()
