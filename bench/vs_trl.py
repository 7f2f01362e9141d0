"""Speed and memory: sapo-edge against TRL's GRPOTrainer on identical work, plus a scaling table.

    pip install -e '.[bench]'          # TRL, only for this benchmark
    .venv/bin/python bench/vs_trl.py   # ~25 min on a 2-core CPU; writes docs/benchmarks.md

Identical work: SmolLM2-135M-Instruct on the CPU, a fixed batch of 4 reasoning-gym questions
(one from each of 4 of the paper's domains), G = 8 completions each, up to 128 new tokens,
temperature 1.0, LoRA r = 16 on the same projections, beta = 0, one optimizer step per round.
Each framework runs in its own process (so peak RSS is its own) and they take turns round by
round (A B A B ...): a warm-up round each, then --rounds measured rounds; medians are reported.
The scaling table runs real sapo-edge Node rounds alone while G, the completion length and
the number of external groups received grow.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from workers import Spec  # noqa: E402

from sapo_edge.tasks import ONE_DIGIT_ADDITION  # noqa: E402

# The scaling table trains real Node rounds, which drop groups whose completions all scored
# alike: on the paper's domains SmolLM2-135M scores ~0, so nothing would train. It uses the
# demo's task instead (one-digit addition, lenient), where most groups are informative.
SCALING_TASK = {
    "domains": {"basic_arithmetic": 1.0},
    "domain_configs": {"basic_arithmetic": ONE_DIGIT_ADDITION},
}
SCALING = (  # (G, max completion tokens, external groups received per round)
    [(g, 128, 0) for g in (4, 8, 16)]
    + [(8, n, 0) for n in (64, 256)]
    + [(8, 128, e) for e in (8, 64)]
)


NOTES = "<!-- notes: written by hand, kept when the benchmark rewrites this file -->"


class Worker:
    def __init__(self, kind: str, spec: Spec, log_path: Path):
        self.kind = kind
        self.log = log_path.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "workers.py"), kind, json.dumps(spec.__dict__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )
        self._expect("READY")

    def _expect(self, prefix: str) -> str:
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise RuntimeError(
            f"{self.kind} worker exited (code {self.proc.wait()}): see {self.log.name}"
        )

    def round(self) -> dict:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return json.loads(self._expect("RESULT"))

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def summarise(rows: list[dict]) -> dict:
    return {
        "round_s": median(rows, "round_s"),
        "gen_tok_s": statistics.median(r["gen_tokens"] / r["gen_s"] for r in rows),
        "step_s": median(rows, "step_s"),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in rows),
        "gen_tokens": median(rows, "gen_tokens"),
    }


def head_to_head(spec: Spec, rounds: int, logs: Path, with_trl: bool) -> tuple[dict, dict]:
    spec.rounds = rounds + 1
    kinds = ["sapo", "trl"] if with_trl else ["sapo"]
    workers = {}
    try:
        for kind in kinds:  # one at a time: loading is not part of the comparison
            workers[kind] = Worker(kind, spec, logs / f"{kind}.log")
        results: dict[str, list[dict]] = {k: [] for k in kinds}
        for r in range(rounds + 1):
            for kind in kinds:
                res = workers[kind].round()
                print(f"round {r} {kind:<5} {json.dumps(res)}", flush=True)
                results[kind].append(res)
    finally:
        for w in workers.values():
            w.close()
    return {k: summarise(v[1:]) for k, v in results.items()}, results


def scaling(spec: Spec, logs: Path, configs) -> list[dict]:
    out = []
    for g, n, e in configs:
        s = Spec(
            **{
                **spec.__dict__,
                **SCALING_TASK,
                "group_size": g,
                "max_new_tokens": n,
                "external": e,
            }
        )
        s.rounds = 2  # a warm-up round, then the measured one
        w = Worker("node", s, logs / f"node-g{g}-n{n}-e{e}.log")
        try:
            w.round()
            res = w.round()
        finally:
            w.close()
        res.update(group_size=g, max_new_tokens=n, external=e)
        print(f"scaling {json.dumps(res)}", flush=True)
        out.append(res)
    return out


def machine() -> str:
    cpu = (
        next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            platform.processor() or platform.machine(),
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import torch
    import transformers

    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    try:
        import trl

        versions += f", trl {trl.__version__}"
    except ImportError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {platform.python_version()}; {versions}"


def render(args, spec: Spec, summary: dict, raw: dict, scale: list[dict], wall: float) -> str:
    from workers import fixed_tasks

    tasks = fixed_tasks(spec)
    lines = [
        "# Benchmarks: sapo-edge vs TRL GRPOTrainer",
        "",
        (
            "Head-to-head from an earlier `python bench/vs_trl.py` run (kept in "
            f"{args.logs}/head_to_head.json); scaling table from "
            if args.scaling_only
            else "Generated by "
        )
        + f"`{' '.join(['python', 'bench/vs_trl.py', *sys.argv[1:]])}` "
        f"on {time.strftime('%Y-%m-%d')} in {wall / 60:.1f} min.",
        "",
        f"Machine: {machine()}.",
        "",
        f"Work per round: {spec.questions} questions x G={spec.group_size} completions, up to "
        f"{spec.max_new_tokens} new tokens, temperature 1.0, LoRA r=16 on "
        "q/k/v/o/gate/up/down, beta=0, one optimizer step, "
        f"{spec.dtype}, CPU. Questions (reasoning-gym, seed {spec.seed}): "
        + ", ".join(t.domain for t in tasks)
        + f". Medians of {args.rounds} rounds after a warm-up round, the two frameworks taking "
        "turns round by round, each in its own process.",
        "",
    ]
    s = summary["sapo"]
    if "trl" in summary:
        t = summary["trl"]
        lines += [
            "| metric | sapo-edge | TRL | sapo-edge / TRL | target |",
            "|---|---:|---:|---:|---|",
            f"| seconds per round | {s['round_s']:.1f} | {t['round_s']:.1f} | "
            f"{s['round_s'] / t['round_s']:.2f} | <= 0.33 |",
            f"| generation tokens/s | {s['gen_tok_s']:.1f} | {t['gen_tok_s']:.1f} | "
            f"{s['gen_tok_s'] / t['gen_tok_s']:.2f} | (higher is better) |",
            f"| seconds per train step | {s['step_s']:.1f} | {t['step_s']:.1f} | "
            f"{s['step_s'] / t['step_s']:.2f} | |",
            f"| peak RSS (MB) | {s['peak_rss_mb']:,.0f} | {t['peak_rss_mb']:,.0f} | "
            f"{s['peak_rss_mb'] / t['peak_rss_mb']:.2f} | <= 0.3 |",
            "",
            "TRL's train step is its round minus the time inside `generate` (scoring and "
            "its reference/old log-prob bookkeeping included).",
            "",
        ]
    else:
        lines += [
            "| metric | sapo-edge |",
            "|---|---:|",
            f"| seconds per round | {s['round_s']:.1f} |",
            f"| generation tokens/s | {s['gen_tok_s']:.1f} |",
            f"| seconds per train step | {s['step_s']:.1f} |",
            f"| peak RSS (MB) | {s['peak_rss_mb']:,.0f} |",
            "",
        ]
    last = raw["sapo"][-1]
    floor = last.get("gemm_floor_s")
    if floor:
        lines += [
            "## Train step vs this CPU's matmul floor",
            "",
            f"The last measured sapo-edge step ({last['step_s']:.1f} s, {last['step_tokens']} "
            f"completion tokens) needs {floor['gflop']:.0f} GFLOP of linear-layer matmuls "
            "(forward, and backward to the inputs; the base weights are frozen). The same GEMMs "
            f"as plain torch matmuls, at the step's shapes, in the same process: "
            f"{floor['seconds']:.1f} s ({floor['gflops_per_s']:.0f} GFLOP/s). "
            f"The step takes **{last['step_s'] / floor['seconds']:.2f}x the floor** (it runs at "
            f"{floor['seconds'] / last['step_s']:.0%} of the GEMMs' speed; target: within 2x).",
            "",
        ]
    if scale:
        lines += [
            "## Scaling (sapo-edge alone, real Node rounds: I=4 own groups, J=4 external)",
            "",
            "Task: one-digit addition, lenient reward (the demo's), 4 questions per round, so "
            "that most groups are informative and the train step runs (a Node drops groups whose "
            "completions all scored alike).",
            "",
            "| G | max tokens | external received | round s | gen s | step s | gen tokens | "
            "train tokens | ms per token | peak RSS (MB) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in scale:
            tokens = r["gen_tokens"] + r["step_tokens"]
            lines.append(
                f"| {r['group_size']} | {r['max_new_tokens']} | {r['external']} | "
                f"{r['round_s']:.1f} | {r['gen_s']:.1f} | {r['step_s']:.1f} | {r['gen_tokens']} | "
                f"{r['step_tokens']} | {1000 * r['round_s'] / max(tokens, 1):.1f} | "
                f"{r['peak_rss_mb']:,.0f} |"
            )
        lines += [
            "",
            "ms per token = round seconds / (generated + trained completion tokens): flat or "
            "falling means cost grows no faster than the work. Each row is its own process "
            "(a warm-up round, then the measured one). External groups come from 8 in-process "
            "peers (real questions of the node's domains, half the completions right); the node "
            "re-verifies every one it samples and trains on at most J=4.",
            "",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="alias, HF id or local directory")
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds each (default 3)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--no-trl", action="store_true", help="sapo-edge only")
    ap.add_argument("--no-scaling", action="store_true", help="skip the scaling table")
    ap.add_argument(
        "--scaling-only",
        action="store_true",
        help="re-run only the scaling table; the head-to-head comes from the last run's "
        "LOGS/head_to_head.json",
    )
    ap.add_argument(
        "--smoke", action="store_true", help="tiny shapes (CI): 2 questions x 2, 8 tokens"
    )
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    ap.add_argument("--logs", type=Path, default=Path("runs/bench"))
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be 1 or more")
    from sapo_edge.models import resolve_model

    model = resolve_model(args.model, progress=print)
    spec = Spec(model_dir=str(model.path), model_id=model.model_id, dtype=args.dtype)
    configs = SCALING
    if args.smoke:
        spec.questions, spec.group_size, spec.max_new_tokens = 2, 2, 8
        configs = [(2, 8, 0), (2, 8, 4)]
    if not args.no_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            ap.error("TRL is not installed: pip install -e '.[bench]', or pass --no-trl")
    args.logs.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    saved = args.logs / "head_to_head.json"
    if args.scaling_only:
        if not saved.is_file():
            ap.error(f"--scaling-only needs an earlier run's {saved}")
        summary, raw = (json.loads(saved.read_text())[k] for k in ("summary", "raw"))
    else:
        summary, raw = head_to_head(spec, args.rounds, args.logs, not args.no_trl)
        saved.write_text(json.dumps({"summary": summary, "raw": raw}, indent=1) + "\n")
    scale = [] if args.no_scaling else scaling(spec, args.logs, configs)
    text = render(args, spec, summary, raw, scale, time.time() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.is_file() and NOTES in (old := args.out.read_text()):
        text += "\n" + NOTES + old.split(NOTES, 1)[1]  # hand-written notes survive a re-run
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
