"""Generation tokens/s: sapo-edge's torch backend against llama.cpp on this CPU, side by side.

    .venv/bin/python bench/vs_llamacpp.py [--quick] [--models smollm2,qwen-shape] [--batches 1,64]
        [--new-tokens 32] [--reps 3] [--threads N] [--no-write]

The same weights in both: SmolLM2-135M-Instruct (the float32 model sapo-edge converts from the
offline GGUF) and the Qwen2.5-0.5B-shaped random model (bench/qwen_shape.py), each converted to a
GGUF at the dtype sapo-edge's `--dtype auto` picks here (bfloat16 or float32: never a quantized
file) by llama.cpp's own `convert_hf_to_gguf.py`. The same prompts (the chat-template ids of the
benchmark's fixed questions, handed to llama.cpp as ids), the same number of new tokens for every
row (end tokens do not stop a row, so both do the same work), temperature 1 (plain sampling from
the full distribution), the same thread count. Batch 1 is one completion of one prompt; the
round's batch is a default round (8 questions x G=8 = 64 rows) decoded together: sapo-edge's
generate() (each prompt prefilled once, its cache shared by its G rows), llama.cpp through its
batch API (each prompt's tokens given once for its G sequences, as its `batched` example does,
every live sequence one token per llama_decode). Tokens/s counts new tokens over the whole call,
prefill included. Each engine runs in its own process, one warm-up call, then the median of
`--reps` calls. Beside each: generation's floor (bench/workers.decode_floor: the linear layers'
GEMMs at the call's shapes, every weight read once per decode step), timed in sapo-edge's process.

llama.cpp comes from PyPI's llama-cpp-python source distribution, built here (`pip install
'.[bench-llamacpp]'` with CMAKE_ARGS="-DGGML_NATIVE=ON"; docs/benchmarks.md); its converter from the
same source (`--llama-src DIR`, else the matching sdist is fetched once into build/llama-src).
`--quick`: SmolLM2 at the round's batch only (a few minutes). Prints, last,
`RESULT generation tokens/s at batch B: sapo-edge X, llama.cpp Y, ratio X/Y` for the round's
batch (the first model's), and writes its table into docs/benchmarks.md (this CPU kind's section).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

ROUND = 64  # a default round: questions_per_round 8 x group_size 8
MODELS = ("smollm2", "qwen-shape")


# ----------------------------------------------------------------------------- the model files
def model_dir(name: str) -> Path:
    if name == "smollm2":
        from sapo_edge.models.resolve import resolve_model

        return resolve_model("smollm2-135m", progress=lambda m: print(m, file=sys.stderr)).path
    from qwen_shape import build

    return build(ROOT / "build" / "qwen-shape")


def auto_dtype(path: Path) -> str:
    """What `--dtype auto` picks for this model here (machine/dtype_pace.py)."""
    from sapo_edge.backends.torch_backend import resolve_dtype
    from sapo_edge.config.settings import Config

    cfg = Config(model=str(path), dtype="auto")
    return str(resolve_dtype("auto", "cpu", lambda m: print(m, file=sys.stderr), cfg)).split(".")[
        -1
    ]


def llama_src(given: Path | None) -> Path:
    """llama.cpp's source (for convert_hf_to_gguf.py): `given`, else the installed
    llama-cpp-python's own sdist, fetched once from the package index into build/llama-src."""
    if given:
        return given
    import importlib.metadata

    version = importlib.metadata.version("llama_cpp_python")
    out = ROOT / "build" / "llama-src"
    src = out / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (src / "convert_hf_to_gguf.py").is_file():
        out.mkdir(parents=True, exist_ok=True)
        spec = f"llama-cpp-python=={version}"
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*cmd, "-d", str(out), spec], check=True)
        with tarfile.open(out / f"llama_cpp_python-{version}.tar.gz") as tar:
            tar.extractall(out, filter="data")
    return src


# llama.cpp's converter, told that an unknown BPE pre-tokenizer is SmolLM2's: the Qwen-shaped
# model carries SmolLM2's tokenizer (qwen_shape.py), whose hash the Qwen path does not know; the
# prompts reach llama.cpp as ids, so its tokenizer only has to load
CONVERT = """
import runpy, sys
src = sys.argv.pop(1)
sys.path[:0] = [src, src + '/gguf-py']
from conversion import base
known = base.TextModel.get_vocab_base_pre
def pre(self, tok):
    try:
        return known(self, tok)
    except NotImplementedError:
        return 'smollm'
base.TextModel.get_vocab_base_pre = pre
sys.argv[0] = src + '/convert_hf_to_gguf.py'
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def gguf_of(path: Path, dtype: str, src: Path) -> Path:
    """The model at `path` as a GGUF of `dtype` (bf16 or f32), converted once by llama.cpp."""
    out = ROOT / "build" / "gguf" / f"{path.name}-{dtype}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        outtype = {"bfloat16": "bf16", "float32": "f32"}[dtype]
        tmp = out.with_suffix(".part")
        cmd = [sys.executable, "-c", CONVERT, str(src), str(path)]
        subprocess.run([*cmd, "--outtype", outtype, "--outfile", str(tmp)], check=True)
        tmp.rename(out)
    return out


# ------------------------------------------------------------------------------- the workers
def prompts_for(rows: int) -> tuple[list, int]:
    """(messages of each prompt, completions per prompt): one prompt at batch 1, a round's 8
    questions x G=8 at 64 (rows / 8 per question otherwise)."""
    from workers import Spec, fixed_tasks

    from sapo_edge.rl.prompts import build_messages

    questions = 1 if rows == 1 else 8
    tasks = fixed_tasks(Spec(model_dir="", questions=questions))
    return [build_messages(t.question) for t in tasks], rows // questions


def sapo_worker(spec: dict) -> dict:
    import torch
    from workers import decode_floor

    from sapo_edge.backends import load_backend
    from sapo_edge.config.settings import Config

    torch.set_num_threads(spec["threads"])
    cfg = Config(model=spec["model_dir"], dtype=spec["dtype"], threads=spec["threads"])
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    backend = load_backend(Path(spec["model_dir"]), cfg, "bench", "cpu", log, kind="torch")
    backend.eos_ids = []  # every row makes exactly new_tokens tokens, as in llama.cpp's runs
    prompts, n = prompts_for(spec["rows"])

    def call(seed: int, tokens: int):
        t0 = time.perf_counter()
        groups = backend.generate(
            prompts, n, max_new_tokens=tokens, temperature=1.0, top_p=1.0, seed=seed
        )
        return time.perf_counter() - t0, groups

    call(0, 4)  # warm-up
    seconds, groups = [], None
    for r in range(spec["reps"]):
        s, groups = call(r + 1, spec["new_tokens"])
        seconds.append(s)
    made = sum(g.tokens for grp in groups for g in grp)
    assert made == spec["rows"] * spec["new_tokens"], made
    floor = decode_floor(backend, prompts, groups)
    return {
        "seconds": seconds,
        "tokens": made,
        "prompt_ids": [backend._prompt_ids(m) for m in prompts],
        "floor_s": floor["seconds"],
    }


def llama_worker(spec: dict) -> dict:
    """llama.cpp's batched decoding: each prompt's tokens once for its n sequences (one KV cache
    shared across sequences), then one llama_decode per step over every sequence's new token."""
    import llama_cpp as L

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(spec["gguf"].encode(), mp)
    if not model:
        raise SystemExit(f"llama.cpp could not load {spec['gguf']}")
    prompts, n, tokens = spec["prompt_ids"], spec["n"], spec["new_tokens"]
    rows = len(prompts) * n
    prefill = sum(map(len, prompts))
    cp = L.llama_context_default_params()
    cp.n_ctx = prefill + rows * tokens + 64
    cp.n_batch = cp.n_ubatch = max(prefill, rows)
    cp.n_seq_max = rows
    cp.kv_unified = True
    cp.n_threads = cp.n_threads_batch = spec["threads"]
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit("llama.cpp could not make a context")
    batch = L.llama_batch_init(max(prefill, rows), 0, rows)
    seq = L.llama_seq_id

    def put(i: int, token: int, pos: int, seqs: list[int], logits: bool) -> None:
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, len(seqs)
        for j, s in enumerate(seqs):
            batch.seq_id[i][j] = seq(s)
        batch.logits[i] = logits

    def call(seed: int, steps: int) -> float:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        smpl = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(smpl, L.llama_sampler_init_dist(seed))
        t0 = time.perf_counter()
        i, where = 0, []  # where: each row's logits index in the batch
        for p, ids in enumerate(prompts):
            seqs = list(range(p * n, p * n + n))
            for k, t in enumerate(ids):
                put(i, t, k, seqs, k == len(ids) - 1)
                i += 1
            where += [i - 1] * n
        batch.n_tokens = i
        if L.llama_decode(ctx, batch):
            raise SystemExit("llama_decode failed (prefill)")
        pos = [len(prompts[r // n]) for r in range(rows)]
        for step in range(steps):
            toks = [L.llama_sampler_sample(smpl, ctx, where[r]) for r in range(rows)]
            if step == steps - 1:
                break
            for r, t in enumerate(toks):
                put(r, t, pos[r], [r], True)
                pos[r] += 1
            batch.n_tokens = rows
            where = list(range(rows))
            if L.llama_decode(ctx, batch):
                raise SystemExit("llama_decode failed (decode)")
        seconds = time.perf_counter() - t0
        L.llama_sampler_free(smpl)
        return seconds

    call(0, 4)  # warm-up
    seconds = [call(r + 1, tokens) for r in range(spec["reps"])]
    return {"seconds": seconds, "tokens": rows * tokens}


WORKERS = {"sapo": sapo_worker, "llama": llama_worker}


def run_worker(kind: str, spec: dict) -> dict:
    """`kind`'s worker in its own process; its RESULT line."""
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"])}
    cmd = [sys.executable, __file__, "--worker", kind, json.dumps(spec)]
    logs = ROOT / "build" / "vs_llamacpp-logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{kind}-{Path(spec['model_dir']).name}-{spec['rows']}.log"
    with open(log, "w") as err:  # llama.cpp prints its whole graph: kept, not shown
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"the {kind} worker failed (exit {proc.returncode}): see {log}")
    return json.loads(lines[-1][7:])


# ------------------------------------------------------------------------------ the write-up
def cpu_kind() -> str:
    """The CPU's model name and its bfloat16 hardware: the key of its section."""
    from bf16_layouts import cpu

    name, flags = cpu()
    bf16 = (
        "AMX"
        if "amx_bf16" in flags
        else "avx512_bf16, no AMX"
        if "avx512_bf16" in flags
        else "no native bfloat16"
    )
    return f"{name} ({bf16})"


def write_section(doc: Path, kind: str, body: str) -> None:
    """This CPU kind's generated section of `doc`, between its markers, replacing the last run's
    on the same kind; other kinds' sections and the rest of the file stay as they are."""
    start, end = f"<!-- vs_llamacpp: {kind} -->", f"<!-- /vs_llamacpp: {kind} -->"
    block = f"{start}\n### Generation against llama.cpp: {kind}\n\n{body}{end}"
    text = doc.read_text() if doc.is_file() else ""
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + block + rest.split(end, 1)[1]
    else:
        anchor = "<!-- vs_llamacpp sections -->"
        if anchor not in text:
            text = (
                text.rstrip("\n")
                + f"\n\n## Generation against llama.cpp, per CPU kind\n\n{anchor}\n"
            )
        text = text.replace(anchor, f"{anchor}\n{block}\n", 1)
    doc.write_text(text)


# ------------------------------------------------------------------------------------ driver
def measure(name: str, rows: int, args, src: Path) -> dict:
    path = model_dir(name)
    dtype = args.dtype or auto_dtype(path)
    spec = dict(model_dir=str(path), dtype=dtype, rows=rows, threads=args.threads)
    spec.update(new_tokens=args.new_tokens, reps=args.reps)
    sapo = run_worker("sapo", spec)
    gguf = gguf_of(path, dtype, src)
    n = rows if rows == 1 else rows // len(sapo["prompt_ids"])
    llama = run_worker(
        "llama", {**spec, "gguf": str(gguf), "prompt_ids": sapo["prompt_ids"], "n": n}
    )
    s_sapo, s_llama = statistics.median(sapo["seconds"]), statistics.median(llama["seconds"])
    row = dict(model=name, dtype=dtype, rows=rows, tokens=sapo["tokens"])
    row.update(sapo_s=s_sapo, llama_s=s_llama, floor_s=sapo["floor_s"])
    row.update(sapo_tps=sapo["tokens"] / s_sapo, llama_tps=llama["tokens"] / s_llama)
    row["prompt_tokens"] = sum(map(len, sapo["prompt_ids"]))
    print(
        f"{name} {dtype} batch {rows}: sapo-edge {row['sapo_tps']:.1f} tok/s "
        f"({s_sapo:.2f} s, {s_sapo / row['floor_s']:.2f}x floor), llama.cpp "
        f"{row['llama_tps']:.1f} tok/s ({s_llama:.2f} s, {s_llama / row['floor_s']:.2f}x floor)",
        flush=True,
    )
    return row


def table(rows: list[dict], args, minutes: float) -> str:
    import importlib.metadata as md

    import torch

    versions = f"torch {torch.__version__}, llama-cpp-python {md.version('llama_cpp_python')}"
    head = [
        f"Generated by `python bench/vs_llamacpp.py{''.join(' ' + a for a in args.argv)}` "
        f"on {date.today()} in {minutes:.1f} min.",
        "",
        f"Machine: {cpu_kind()}, {os.cpu_count()} cores; {args.threads} threads in both engines; "
        f"Python {platform.python_version()}; {versions}. Nothing else ran.",
        "",
        f"Work: {args.new_tokens} new tokens for every row (end tokens do not stop a row), "
        "temperature 1, the same prompt ids; batch 1 is one prompt, the round's batch 8 prompts "
        "x 8 completions decoded together. Medians of "
        f"{args.reps} calls after a warm-up. Floor: the call's linear-layer GEMMs, every weight "
        "read once per decode step (bench/workers.decode_floor).",
        "",
        "| model | dtype | batch | prompt tokens | sapo-edge tok/s | llama.cpp tok/s | "
        "sapo-edge / llama.cpp | sapo-edge x floor | llama.cpp x floor |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        head.append(
            f"| {r['model']} | {r['dtype']} | {r['rows']} | {r['prompt_tokens']} | "
            f"{r['sapo_tps']:.1f} | {r['llama_tps']:.1f} | **{r['sapo_tps'] / r['llama_tps']:.2f}** | "
            f"{r['sapo_s'] / r['floor_s']:.2f}x | {r['llama_s'] / r['floor_s']:.2f}x |"
        )
    return "\n".join(head) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("spec", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="SmolLM2 at the round's batch only")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default=f"1,{ROUND}")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], help="default: what auto picks")
    ap.add_argument("--llama-src", type=Path, help="llama.cpp's source (its converter)")
    ap.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md alone")
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(WORKERS[args.worker](json.loads(args.spec))), flush=True)
        return 0
    args.argv = sys.argv[1:]
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        raise SystemExit(
            "llama-cpp-python is not installed: CMAKE_ARGS='-DGGML_NATIVE=ON' "
            ".venv/bin/pip install '.[bench-llamacpp]' (builds llama.cpp here, ~10 min)"
        ) from None
    models = ["smollm2"] if args.quick else args.models.split(",")
    batches = [ROUND] if args.quick else [int(b) for b in args.batches.split(",")]
    t0 = time.time()
    src = llama_src(args.llama_src)
    rows = [measure(m, b, args, src) for m in models for b in batches]
    if not args.no_write:
        write_section(
            ROOT / "docs" / "benchmarks.md", cpu_kind(), table(rows, args, (time.time() - t0) / 60)
        )
    last = next((r for r in rows if r["rows"] == max(batches)), rows[-1])
    ratio = last["sapo_tps"] / last["llama_tps"]
    print(
        f"RESULT generation tokens/s at batch {last['rows']}: sapo-edge {last['sapo_tps']:.1f}, "
        f"llama.cpp {last['llama_tps']:.1f}, ratio {ratio:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
