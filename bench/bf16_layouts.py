"""Which bfloat16 LM-head products survive on this CPU: each layout at each row count in a child
process, so a product that kills its process (torch 2.13.0 on AMX: SIGFPE in `g @ w.T`, issue 47)
is reported, not fatal. Needs torch only; prints one JSON line per (layout, model, rows).

    python bench/bf16_layouts.py [--rows 8,24,25,31,32,33,64] [--models smollm2,qwen]

Layouts: `crash` is the issue's g [rows, vocab] @ w.T with w [hidden, vocab] (a transposed view
reducing over the vocabulary: what bench/workers.py once timed); `head_backward` is what
head_logps.py runs, q [rows, vocab] @ W with W [vocab, hidden] as nn.Linear stores it; and
`head_forward` is F.linear(h [rows, hidden], W), the logits.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

MODELS = {"smollm2": (49_152, 576), "qwen": (151_936, 896)}
CHILD = """
import sys, torch
from torch.nn import functional as F
layout, vocab, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = torch.bfloat16
for rows in map(int, sys.argv[4].split(",")):
    print(rows, flush=True)  # the parent reads the last row count started
    if layout == "crash":
        out = torch.randn(rows, vocab, dtype=d) @ torch.randn(hidden, vocab, dtype=d).T
    elif layout == "head_backward":
        out = torch.randn(rows, vocab, dtype=d) @ torch.randn(vocab, hidden, dtype=d)
    else:
        out = F.linear(torch.randn(rows, hidden, dtype=d), torch.randn(vocab, hidden, dtype=d))
    print("ok", bool(out.isfinite().all()), flush=True)
"""


def cpu() -> tuple[str, list[str]]:
    """The CPU's model name and which of the flags that matter here it reports."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return platform.machine(), []
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                 if ln.startswith("model name")), platform.machine())  # fmt: skip
    return name, sorted(set(text.split()) & {"amx_bf16", "amx_tile", "avx512_bf16", "avx2"})


def run(layout: str, model: str, rows: list[int], timeout: float) -> list[dict]:
    """Each row count once, in as few child processes as dying allows."""
    vocab, hidden = MODELS[model]
    out, todo = [], list(rows)
    while todo:
        cmd = [sys.executable, "-c", CHILD, layout, str(vocab), str(hidden)]
        try:
            done = subprocess.run(
                [*cmd, ",".join(map(str, todo))], capture_output=True, text=True, timeout=timeout
            )
            lines, rc = done.stdout.split("\n"), done.returncode
        except subprocess.TimeoutExpired as e:
            lines, rc = (e.stdout or b"").decode().split("\n") if e.stdout else [], "timeout"
        started = [int(x) for x in lines if x.strip().isdigit()]
        finished = {int(a): b for a, b in zip(lines, lines[1:], strict=False)
                    if a.strip().isdigit() and b.startswith("ok")}  # fmt: skip
        for r in started:
            if r in finished:
                out.append({"rows": r, "ok": True, "finite": finished[r].endswith("True")})
        dead = next((r for r in started if r not in finished), None)
        if dead is None:
            break
        out.append({"rows": dead, "ok": False, "exit": rc})
        todo = todo[todo.index(dead) + 1 :]
    return [{"layout": layout, "model": model, **o} for o in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="1,8,16,24,25,28,31,32,33,48,64,256")
    ap.add_argument("--models", default="smollm2,qwen")
    ap.add_argument("--layouts", default="crash,head_backward,head_forward")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    import torch

    name, found = cpu()
    print(json.dumps({"cpu": name, "flags": found, "torch": torch.__version__}), flush=True)
    rows = [int(r) for r in args.rows.split(",")]
    for layout in args.layouts.split(","):
        for model in args.models.split(","):
            for line in run(layout, model, rows, args.timeout):
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
