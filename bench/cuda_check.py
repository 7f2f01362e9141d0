"""The CUDA path, checked on a real NVIDIA GPU (not a test: CI has no GPU; run it where one is lent,
see docs/cuda.md). Four checks, each printed as one line, the whole result as JSON (--out):

1. `--backend auto` picks torch on cuda:0 and `--dtype auto` picks bfloat16 there.
2. The same samples give the same numbers on the GPU as on the CPU (float32, the tiny Qwen, both
   adapters drawn from one seed): per-token log-probs, then the loss, the gradient norm and the
   LoRA weights after three train steps. The CPU path is the one checked against TRL's own loss
   and plain peft's gradient (tests/), so it is the reference here.
3. What the GPU samples is what it trains: the log-probs of its own completions, recomputed by
   the CPU from the ids alone, match; every finished completion ends with one of the two end ids.
4. A headless `sapo-edge run` (auto backend, tiny Qwen, 3 rounds) exits 0 with 3 rounds in
   metrics.jsonl, and --timing times one round's two phases at Qwen2.5-0.5B's shapes on the GPU
   in bfloat16 and float32 (bench/qwen_shape.py; --tokenizer is a directory holding SmolLM2's
   tokenizer files).

    python bench/cuda_check.py --out cuda.json [--timing --tokenizer DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from sapo_edge.backends import select_backend  # noqa: E402
from sapo_edge.backends.base import Sample  # noqa: E402
from sapo_edge.backends.torch_backend import TorchBackend, resolve_dtype  # noqa: E402
from sapo_edge.config.settings import Config  # noqa: E402
from sapo_edge.rl.prompts import build_messages  # noqa: E402

QUESTIONS = ["Calculate 37 + 85.", "What is 12 * 7?", "Reverse the word 'policy'.", "Sort 9, 2, 7."]
quiet = lambda m: None  # noqa: E731


def _prompts() -> list:
    return [build_messages(q) for q in QUESTIONS]


def _samples(prompts: list, groups: list) -> list[Sample]:
    """Every completion as a training sample, advantages +1/-1 by position in its group."""
    return [
        Sample(p, c, 1.0 if i % 2 == 0 else -1.0)
        for p, grp in zip(prompts, groups, strict=True)
        for i, c in enumerate(grp)
    ]


def _max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def check_choice() -> dict:
    kind, device = select_backend("auto", log=quiet)
    dtype = str(resolve_dtype("auto", device, quiet)).removeprefix("torch.")
    ok = kind == "torch" and device.startswith("cuda") and dtype == "bfloat16"
    return {
        "ok": ok,
        "kind": kind,
        "device": device,
        "dtype": dtype,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def check_same_numbers(model: Path) -> dict:
    cfg = Config(dtype="float32", group_size=4, max_new_tokens=24, learning_rate=1e-3)
    cpu = TorchBackend(model, cfg, adapter="cpu", device="cpu", log=quiet)
    gpu = TorchBackend(model, cfg, adapter="gpu", device="cuda:0", log=quiet)
    for b in (cpu, gpu):
        b.reset(7)
    gen = dict(max_new_tokens=24, temperature=1.0, top_p=1.0)
    groups = gpu.generate(_prompts(), 4, **gen, seed=1)
    samples = _samples(_prompts(), groups)
    out: dict = {"samples": len(samples), "tokens": sum(s.completion.tokens for s in samples)}
    out["logp_max_diff"] = _max_diff(cpu.logprobs(samples), gpu.logprobs(samples))
    ends = {c.end_id for grp in groups for c in grp if c.finished}
    out["end_ids_seen"] = sorted(ends)
    out["end_ids_ok"] = ends <= set(gpu.eos_ids)
    steps = []
    for _ in range(3):
        a, b = cpu.train_step(samples), gpu.train_step(samples)
        steps.append({"loss": [a.loss, b.loss], "grad_norm": [a.grad_norm, b.grad_norm]})
    out["steps"] = steps
    out["loss_max_diff"] = max(abs(s["loss"][0] - s["loss"][1]) for s in steps)
    out["grad_norm_max_rel"] = max(
        abs(s["grad_norm"][0] - s["grad_norm"][1]) / max(s["grad_norm"][0], 1e-12) for s in steps
    )
    out["lora_max_diff"] = max(
        (p.detach().cpu() - q.detach().cpu()).abs().max().item()
        for p, q in zip(cpu.params, gpu.params, strict=True)
    )
    out["lora_moved"] = max(p.detach().abs().max().item() for p in cpu.params)
    out["logp_after_max_diff"] = _max_diff(cpu.logprobs(samples), gpu.logprobs(samples))
    out["ok"] = bool(
        out["logp_max_diff"] < 1e-3
        and out["loss_max_diff"] < 1e-4
        and out["grad_norm_max_rel"] < 1e-3
        and out["logp_after_max_diff"] < 1e-3
        and out["end_ids_ok"]
    )
    cpu.close()
    gpu.close()
    return out


def check_headless_run(model: Path, work: Path) -> dict:
    run = [
        sys.executable,
        "-m",
        "sapo_edge.cli",
        "run",
        "--headless",
        "--model",
        str(model),
        "--domains",
        "basic_arithmetic",
        "--questions-per-round",
        "4",
        "--group-size",
        "4",
        "--max-new-tokens",
        "16",
        "--rounds",
        "3",
        "--name",
        "gpu",
        "--out-dir",
        str(work / "runs"),
        "--solo",
    ]
    t0 = time.time()
    p = subprocess.run(run, capture_output=True, text=True, timeout=300, cwd=work)
    log = p.stdout + p.stderr
    metrics = work / "runs" / "gpu" / "metrics.jsonl"
    rounds = len(metrics.read_text().splitlines()) if metrics.is_file() else 0
    on_gpu = "torch on cuda:0" in log
    return {
        "ok": p.returncode == 0 and rounds == 3 and on_gpu,
        "rc": p.returncode,
        "rounds": rounds,
        "says_cuda": on_gpu,
        "seconds": round(time.time() - t0, 1),
        "tail": log[-1500:],
    }


def time_qwen_shape(tokenizer: Path, work: Path, compile_try: bool = False) -> dict:
    from gpu_decode import bandwidth, compare, compiled_step_ms
    from qwen_shape import build

    model = build(work / "qwen-shape", tokenizer)
    prompts = [build_messages(q) for q in QUESTIONS]
    bw = bandwidth()
    out: dict = {"bandwidth_gb_s": round(bw / 1e9)}
    for dtype in ("bfloat16", "float32"):
        cfg = Config(dtype=dtype, group_size=8, max_new_tokens=200)
        b = TorchBackend(model, cfg, adapter=dtype, device="cuda:0", log=print)
        b.reset(0)
        gen = dict(max_new_tokens=200, temperature=1.0, top_p=1.0)
        # generation three ways (graph, static eager, growing) against the floor; each way
        # warmed up first at the measured shapes (a first bf16 generation on an H100 took 2.3x
        # the next one)
        decode = compare(b, prompts, 8, 200, bw)
        print(f"  {dtype} generation: {json.dumps(decode)}", flush=True)
        if compile_try and dtype == "bfloat16":
            try:
                decode["compiled_step"] = compiled_step_ms(b, prompts)
            except Exception as e:  # noqa: BLE001 - an experiment: say what failed, go on
                decode["compiled_step"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"  {dtype} compiled step: {json.dumps(decode['compiled_step'])}", flush=True)
        groups = b.generate(prompts, 8, **gen, seed=1)
        gen_s = decode["graph"]["s"]
        samples = _samples(prompts, groups)
        b.train_step(samples)  # warm-up: the optimizer state
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        st = b.train_step(samples)
        torch.cuda.synchronize()
        out[dtype] = {
            "decode": decode,
            "rows": len(samples),
            "gen_tokens": sum(c.tokens for g in groups for c in g),
            "gen_s": round(gen_s, 2),
            "gen_tok_s": round(sum(c.tokens for g in groups for c in g) / gen_s),
            "step_s": round(time.perf_counter() - t0, 2),
            "step_tokens": st.tokens,
            "peak_mb": round(torch.cuda.max_memory_allocated() / 2**20),
        }
        b.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("cuda_check.json"))
    ap.add_argument("--timing", action="store_true", help="also time Qwen2.5-0.5B's shapes")
    ap.add_argument("--tokenizer", type=Path, help="SmolLM2's tokenizer files (for --timing)")
    ap.add_argument(
        "--compile-try",
        action="store_true",
        help="with --timing: also time the decode step compiled by torch.compile (an experiment)",
    )
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU is visible to torch: run this where one is")
    from tiny_model import build_tiny_qwen

    result: dict = {"torch": torch.__version__, "cuda": torch.version.cuda}
    with tempfile.TemporaryDirectory(prefix="sapo-cuda-") as tmp:
        work = Path(tmp)
        model = build_tiny_qwen(work / "tiny-qwen")
        checks = [
            ("choice", check_choice),
            ("same_numbers", lambda: check_same_numbers(model)),
            ("headless_run", lambda: check_headless_run(model, work)),
        ]
        if a.timing:
            checks.append(("qwen_shape", lambda: time_qwen_shape(a.tokenizer, work, a.compile_try)))
        for name, fn in checks:
            t0 = time.time()
            try:
                result[name] = fn()
            except Exception as e:  # noqa: BLE001 - a failed check is reported, the rest run
                result[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            shown = {k: v for k, v in result[name].items() if k not in ("tail", "steps")}
            print(f"{name} ({time.time() - t0:.0f} s): {json.dumps(shown)}", flush=True)
            a.out.write_text(json.dumps(result, indent=1))
    failed = [k for k, v in result.items() if isinstance(v, dict) and v.get("ok") is False]
    print("all checks passed" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
