"""Evidence: does sharing help, with seeds and intervals; the adaptive I/J and the other policies.

    .venv/bin/python experiments/evidence.py --commit    # the whole plan (hours: docs/results.md)

One cell = one seed x one split: a `sapo-edge sim` of the sweep's settings (experiments/
sweep.toml: 4 SmolLM2-135M nodes, 12 rounds) with that seed and I/J, then every node's final
adapter scored on held-out questions. Splits: 8/0, 6/2, 4/4, 2/6 (I local + J external of 8
groups) and `adaptive` (mix = adaptive: each node picks J every round, I + J = 8), each also
with `+targeted` (4/4+targeted, adaptive+targeted: external_sampling = targeted, the peer groups
that teach a node something first; without it, the paper's uniform draw) and/or
`+no-negatives` (4/4+no-negatives: external_negatives = false, the peers' wrong answers trained
at advantage 0, so peers teach by their right answers only). The default plan:
8/0, 4/4 and adaptive on seeds 0, 1, 2; 6/2 and 2/6 on seed 0; plus the base model's score.

Each finished cell writes its summary (docs/evidence/<label>/seed-S-<split>.json and .md) at
once, and with --commit commits those two files, so a long experiment can stop anywhere and go
on later, here or on another machine, from what is committed: a cell whose summary exists is
skipped; a cell cut short resumes from its newest checkpoint (runs/evidence/...), and node
evaluations already done are kept. Then docs/results.md and the plots are rebuilt from whatever
summaries exist (experiments/evidence_report.py).

Held-out pass@1: node k of every cell answers the same HELDOUT questions (held-out seed k, one
sample each), so a cell scores nodes x per-node completions >= samples_for_se(0.015) = 1112:
its standard error is below 0.015 whatever the rewards' spread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import alone  # noqa: E402
import prank  # noqa: E402
from stats import samples_for_se, standard_error  # noqa: E402

TARGETED = "+targeted"  # a split's suffix: external_sampling = targeted (sapo_edge/rl/targeting.py)
NO_NEGATIVES = "+no-negatives"  # external_negatives = false: peers' wrong answers at advantage 0
# in this order: 4/4+targeted+no-negatives; the prank's last (experiments/prank.py: 4/4+prank+trim)
SUFFIXES = (TARGETED, NO_NEGATIVES, *prank.SUFFIXES, alone.ALONE)  # +alone: experiments/alone.py


# the settings a cell's summary keeps: what the reports read of it (aha_lines reads
# format_instruction to know an experiment told every node the format: without it the
# `Aha speed-up:` line was never written from real cells)
SUMMARY_CONFIG_KEYS = (
    "model",
    "nodes",
    "rounds",
    "questions_per_round",
    "group_size",
    "max_new_tokens",
    "local_samples",
    "external_samples",
    "mix",
    "external_sampling",
    "targeted_share",
    "external_negatives",
    "external_after_answer",
    "learning_rate",
    "lenient",
    "lenient_credit",
    "format_example",
    "format_instruction",
    "hinted_nodes",
    "hint_rounds",
    "dtype",
    "seed",
    "domains",
    "domain_configs",
)


def parse_split(split: str) -> tuple[str, set[str]]:
    """A split's mix (I/J or adaptive) and its suffixes."""
    mix, found = split, set()
    for suffix in reversed(SUFFIXES):
        if mix.endswith(suffix):
            mix, found = mix.removesuffix(suffix), found | {suffix}
    return mix, found


SE_TARGET = 0.015
BASE = "base"  # the untrained model's held-out score: one cell per label, seed-independent


def slug(split: str) -> str:
    return split.replace("/", "-").replace("+", "-")


def summary_path(docs: Path, label: str, seed: int | None, split: str) -> Path:
    name = "base" if split == BASE else f"seed-{seed}-{slug(split)}"
    return docs / "evidence" / label / f"{name}.json"


def plan(seeds: list[int], splits: list[str], single_seed_splits: list[str]) -> list[tuple]:
    """Cells in the order they run: the base model, then seed by seed, so every seed's paired
    comparison is complete before the next seed starts."""
    cells: list[tuple] = [(None, BASE)]
    for k, seed in enumerate(seeds):
        cells += [(seed, s) for s in splits]
        if k == 0:
            cells += [(seed, s) for s in single_seed_splits]
    return cells


def check_split(split: str) -> str:
    mix, suffixes = parse_split(split)
    if split == BASE or mix == "adaptive":
        return split
    parts = mix.split("/")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise SystemExit(
            f"split {split!r}: write I/J (for example 4/4) or adaptive, either with "
            f"{TARGETED} for targeted external samples (4/4{TARGETED}) and/or {NO_NEGATIVES} "
            f"to train the peers' wrong answers at advantage 0 (4/4{NO_NEGATIVES})."
        )
    if suffixes and int(parts[1]) == 0:
        raise SystemExit(
            f"split {split!r}: J = 0 samples no peer groups; drop {' and '.join(sorted(suffixes))}."
        )
    prank.check_suffixes(split, suffixes)
    return split


def cell_config(args: argparse.Namespace, seed: int | None, split: str):
    from sapo_edge.config.settings import Config

    overrides: dict = {"resume": True, "seed": 0 if seed is None else seed, "dtype": args.dtype}
    if args.rounds:
        overrides["rounds"] = args.rounds
    if args.checkpoint_every:
        overrides["checkpoint_every"] = args.checkpoint_every
    if args.hint_rounds:
        overrides["hint_rounds"] = args.hint_rounds
    mix, suffixes = parse_split(split)
    if split != BASE:
        overrides["external_sampling"] = "targeted" if TARGETED in suffixes else "uniform"
        overrides["external_negatives"] = NO_NEGATIVES not in suffixes
    if prank.TRIM in suffixes or prank.for_split(suffixes):  # a prank's cell says which, always
        overrides["external_after_answer"] = "drop" if prank.TRIM in suffixes else "train"
    if mix == "adaptive":
        base = Config.load(args.config)
        budget = base.local_samples + base.external_samples
        overrides.update(mix="adaptive", local_samples=budget - 4, external_samples=4)
    elif split != BASE:
        i, j = (int(x) for x in mix.split("/"))
        overrides.update(mix="fixed", local_samples=i, external_samples=j)
    cell = "base" if split == BASE else f"seed-{seed}/{slug(split)}"
    overrides["out_dir"] = str(args.out / args.label / cell)
    return Config.load(args.config, overrides)


def heldout_per_node(nodes: int, target: float = SE_TARGET) -> int:
    return math.ceil(samples_for_se(target) / nodes)


def run_cell(args: argparse.Namespace, seed: int | None, split: str) -> dict:
    """Train (unless base), evaluate every node, and return the cell's summary."""
    from sapo_edge.rl.metrics import PrintCallback, read_rewards
    from sapo_edge.run.build import node_id_for
    from sapo_edge.run.runner import run_sim

    cfg = cell_config(args, seed, split)
    out = Path(cfg.out_dir)
    names = [f"{cfg.name}-{k}" for k in range(cfg.nodes)]
    # rounds a resumed cell had already recorded: sim_seconds and sim_cpu_seconds are this run's
    done_before = min(len(read_rewards(out / n / "metrics.jsonl")) for n in names)
    t0, c0 = time.time(), time.process_time()
    scene = prank.for_split(parse_split(split)[1])
    if scene is not None:  # the prankster's transport, its removal, the phrase counted
        watch = prank.PrankRun(PrintCallback(), scene, names, cfg.lenient)
        run_sim(cfg, watch, scenario=watch)
    elif split != BASE:
        for phase in alone.phases(cfg, parse_split(split)[1]):  # one, or two with +alone
            run_sim(phase)
    sim_seconds, sim_cpu = time.time() - t0, time.process_time() - c0
    per_node = args.heldout_per_node or heldout_per_node(cfg.nodes)
    t1, c1 = time.time(), time.process_time()
    heldout = evaluate_nodes(cfg, out, names, per_node, trained=split != BASE)
    summary = {
        "label": args.label,
        "seed": seed,
        "split": split,
        "config": {k: v for k, v in cfg.to_saved_dict().items() if k in SUMMARY_CONFIG_KEYS},
        "heldout": heldout,
        "sim_seconds": sim_seconds if split != BASE else 0.0,
        "sim_first_round": done_before,  # sim_* count rounds from here (earlier runs did the rest)
        "eval_seconds": time.time() - t1,
        # CPU seconds of this process (all its threads): on a busy machine wall time grows, these
        # do not, so they are what a duration estimate for a quiet machine starts from
        "sim_cpu_seconds": sim_cpu if split != BASE else 0.0,
        "eval_cpu_seconds": time.process_time() - c1,
        "code": args.code,
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if split != BASE:
        metrics = {n: _metrics(out / n / "metrics.jsonl") for n in names}
        summary["rewards"] = {n: read_rewards(out / n / "metrics.jsonl") for n in names}
        summary["external_target"] = {n: [m["external_target"] for m in metrics[n]] for n in names}
        summary["external_used"] = {n: [m["external_used"] for m in metrics[n]] for n in names}
        summary["external_targeted"] = {
            n: [m.get("external_targeted", 0) for m in metrics[n]] for n in names
        }
        # the answer format as a skill (hinted nodes, experiments/aha.toml): per node and round,
        # the share of own answers in tags, the strict reward, and the groups trained per producer
        summary["node_ids"] = {n: node_id_for(n) for n in names}
        summary["tagged_share"] = {n: [m.get("tagged_share") for m in metrics[n]] for n in names}
        summary["strict_reward"] = {n: [m.get("strict_reward") for m in metrics[n]] for n in names}
        summary["external_from"] = {n: [m["external_from"] for m in metrics[n]] for n in names}
        summary["external_zeroed"] = {  # +no-negatives: peer completions trained at advantage 0
            n: [m.get("external_zeroed", 0) for m in metrics[n]] for n in names
        }
        # what each node-round cost: wall seconds (as run: a lane beside other work is slower)
        # and CPU seconds (about a quiet machine's; None in rounds run before it was recorded)
        summary["round_seconds"] = {n: [m["round_seconds"] for m in metrics[n]] for n in names}
        summary["round_cpu_seconds"] = {
            n: [m.get("round_cpu_seconds") for m in metrics[n]] for n in names
        }
        summary["cumulative"] = {n: sum(r) for n, r in summary["rewards"].items()}
        summary["total"] = sum(summary["cumulative"].values())
        summary["rounds_done"] = min(len(r) for r in summary["rewards"].values())
    if scene is not None:  # per node and round: the phrase in its answers and what it trained
        summary["prank"] = scene.to_dict()
        summary.update(prank.read(out, names, cfg.rounds))
    return summary


def evaluate_nodes(cfg, out: Path, names: list[str], per_node: int, trained: bool, tag: str = ""):
    """Node k's final adapter (or the base model, trained=False) on held-out seed k's questions,
    each node's scores kept in out/eval-<name><tag>.json as it finishes (a run cut short keeps
    the evaluations it finished); the summary's "heldout": per node, pass@1, SE, completions.
    With hinted nodes (the format as the skill) every adapter is asked without the worked
    example and scored strictly: what a node learned, not what its prompt showed it."""
    from sapo_edge.run.evaluate import evaluate

    aha = {"example": False, "strict": True} if cfg.hinted_nodes else {}

    heldout = {}
    for k, name in enumerate(names):
        target = out / f"eval-{name}{tag}.json"
        if not target.is_file():
            r = evaluate(
                cfg,
                questions=per_node,
                samples=1,
                checkpoint=str(out / name) if trained else "",
                seed=k,
                **aha,
            )
            _write_json(target, {"heldout_seed": k, "scores": r.scores, "source": r.source})
        heldout[name] = json.loads(target.read_text())
    scores = [s for h in heldout.values() for s in h["scores"]]
    return {
        "asked": "without the example, strict" if aha else "as trained, the config's reward",
        "per_node": {n: node_heldout(h["scores"]) for n, h in heldout.items()},
        "pass_at_1": sum(scores) / len(scores),
        "se": standard_error(scores) if len(scores) > 1 else None,
        "completions": len(scores),
    }


def node_heldout(scores: list[float]) -> dict:
    return {
        "n": len(scores),
        "pass_at_1": sum(scores) / len(scores),
        "scores": scores,
    }


def _metrics(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(ln) for ln in lines if ln.strip()]


def cell_table(s: dict) -> str:
    """The cell's summary as a small Markdown table."""
    head = f"# {s['label']}: " + (
        "base model" if s["split"] == BASE else f"seed {s['seed']}, split {s['split']}"
    )
    h = s["heldout"]
    lines = [head, ""]
    if s["split"] == BASE:
        lines.append("| node set | held-out pass@1 | completions |")
        lines.append("|---|---|---|")
        for n, v in h["per_node"].items():
            lines.append(f"| {n} | {v['pass_at_1']:.3f} | {v['n']} |")
    else:
        lines.append("| node | cumulative reward | J chosen (per round) | held-out pass@1 |")
        lines.append("|---|---|---|---|")
        for n, cum in s["cumulative"].items():
            js = ",".join(str(j) for j in s["external_target"][n])
            lines.append(f"| {n} | {cum:.3f} | {js} | {h['per_node'][n]['pass_at_1']:.3f} |")
        lines.append(f"| **total** | **{s['total']:.3f}** | | |")
    se = "-" if h["se"] is None else f"{h['se']:.4f}"
    lines += [
        "",
        f"Held-out pass@1 {h['pass_at_1']:.3f} (SE {se}, {h['completions']} completions). "
        f"Code {s['code']}, finished {s['finished']}; sim {s['sim_seconds'] / 60:.1f} min"
        f"{_resumed(s)}, evaluation {s['eval_seconds'] / 60:.1f} min.",
        "",
    ]
    return "\n".join(lines)


def _resumed(s: dict) -> str:
    """What the sim minutes cover when the cell resumed: this run's rounds only."""
    first, done = s.get("sim_first_round", 0), s.get("rounds_done", 0)
    if not first:
        return ""
    if first >= done:
        return " (no round trained in this run: earlier runs did them all)"
    return f" (rounds {first}-{done - 1}: earlier runs trained the rest)"


def write_summary(docs: Path, summary: dict, commit: bool) -> list[Path]:
    path = summary_path(docs, summary["label"], summary["seed"], summary["split"])
    _write_json(path, summary)
    md = path.with_suffix(".md")
    tmp = md.with_suffix(".md.tmp")
    tmp.write_text(cell_table(summary), encoding="utf-8")
    tmp.replace(md)
    if commit:
        git_commit([path, md], f"evidence {summary['label']}: {path.stem} finished")
    return [path, md]


def git_commit(paths: list[Path], message: str) -> None:
    """Commit just these files (lanes take turns through a lock file)."""
    import fcntl

    top = Path(_git(["rev-parse", "--show-toplevel"], cwd=paths[0].parent))
    git_dir = Path(_git(["rev-parse", "--absolute-git-dir"], cwd=top))
    with (git_dir / "evidence.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            files = [str(p.resolve()) for p in paths]
            subprocess.run(["git", "add", "--", *files], cwd=top, check=True)
            subprocess.run(
                ["git", "commit", "-q", "-m", message, "--", *files], cwd=top, check=True
            )
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def code_version() -> str:
    """The commit this process runs (loaded at its start), +dirty when tracked files differ."""
    head = _git(["rev-parse", "--short", "HEAD"])
    dirty = _git(["status", "--porcelain", "--untracked-files=no", "--", str(HERE.parent)])
    return head + ("+dirty" if dirty and head != "unknown" else "")


def _git(argv: list[str], cwd: Path | None = None) -> str:
    try:
        return subprocess.run(
            ["git", *argv], cwd=cwd or HERE, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def todo(args: argparse.Namespace) -> list[tuple]:
    """The plan's cells that have no summary yet."""
    cells = plan(args.seeds, args.splits, args.single_seed_splits)
    return [c for c in cells if not summary_path(args.docs, args.label, *c).is_file()]


def lane_worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    for seed, split in json.loads(args.lane):
        if summary_path(args.docs, args.label, seed, split).is_file():  # done here or committed
            print(f"cell done before: {summary_path(args.docs, args.label, seed, split)}")
            continue
        summary = run_cell(args, seed, split)
        write_summary(args.docs, summary, args.commit)
        print(f"cell done: {summary_path(args.docs, args.label, seed, split)}", flush=True)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str) -> list[str]:
    try:
        return [check_split(x.strip()) for x in text.split(",") if x.strip()]
    except SystemExit as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=HERE / "sweep.toml")
    ap.add_argument("--label", default="main", help="which experiment (main; long for --rounds 24)")
    ap.add_argument("--rounds", type=int, default=0, help="override the config's rounds")
    ap.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="override the config's checkpoint_every (a lane stopped between sessions loses less)",
    )
    ap.add_argument(
        "--hint-rounds",
        type=int,
        default=0,
        help="override the config's hint_rounds: the hinted nodes stop after this many rounds "
        "(does the skill pass on among the others? give it its own --label)",
    )
    ap.add_argument("--seeds", type=_ints, default=[0, 1, 2], help="seeds (0,1,2)")
    ap.add_argument(
        "--splits", type=_names, default=["8/0", "4/4", "adaptive"], help="run on every seed"
    )
    ap.add_argument(
        "--single-seed-splits", type=_names, default=["6/2", "2/6"], help="run on the first seed"
    )
    ap.add_argument(
        "--heldout-per-node",
        type=int,
        default=0,
        help="held-out questions per node (default: enough for SE < 0.015 per cell)",
    )
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help="every cell's dtype (default float32, as the first sweep; not auto, which differs by machine)",
    )
    ap.add_argument("--out", type=Path, default=Path("runs/evidence"), help="runs and checkpoints")
    ap.add_argument("--docs", type=Path, default=Path("docs"), help="summaries and results.md")
    ap.add_argument("--lanes", type=int, default=2, help="parallel processes (default 2)")
    ap.add_argument("--commit", action="store_true", help="git-commit each cell's summary")
    ap.add_argument("--report-only", action="store_true", help="only rebuild the report")
    ap.add_argument("--lane", default="", help=argparse.SUPPRESS)  # JSON: this lane's cells
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.code = code_version()
    cell_config(args, 0, "8/0")  # a bad config fails here, before any lane starts
    for split in args.splits + args.single_seed_splits:  # ...and a +alone without --hint-rounds
        alone.phases(cell_config(args, 0, split), parse_split(split)[1])
    if (
        args.commit
        and _git(["rev-parse", "--show-toplevel"], cwd=args.docs.resolve().parent) == "unknown"
    ):
        raise SystemExit(
            f"--commit: {args.docs} is not inside a git checkout; drop --commit or run from one."
        )
    if args.lane:
        lane_worker(args)
        return 0
    if not args.report_only and todo(args):
        if args.lanes <= 1:  # in this process
            args.lane = json.dumps(todo(args))
            lane_worker(args)
        else:
            _run_lanes(args, argv if argv is not None else sys.argv[1:])
    from evidence_report import write_results

    write_results(args.docs)
    return 0


def _run_lanes(args: argparse.Namespace, argv: list[str]) -> None:
    cells = todo(args)
    lanes = max(1, min(args.lanes, len(cells)))
    threads = max(1, (os.cpu_count() or 1) // lanes)
    log_dir = args.out / args.label
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"{len(cells)} cells to run in {lanes} lane(s); logs in {log_dir}/", flush=True)
    procs = []
    for k in range(lanes):
        cmd = [sys.executable, __file__, *argv, "--lane", json.dumps(cells[k::lanes])]
        cmd += ["--threads", str(threads)]
        log = (log_dir / f"lane-{k}.log").open("a")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a lane failed (exit codes {codes}): see {log_dir}/lane-*.log")


if __name__ == "__main__":
    sys.exit(main())
