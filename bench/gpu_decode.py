"""Generation on a GPU three ways, against the memory-bandwidth floor (run by bench/cuda_check.py
--timing; not a test: CI has no GPU).

- `graph`: the static KV cache, each decode step replayed as one CUDA graph (what a GPU runs);
- `static`: the same static cache and step, launched op by op (what the graph saves);
- `growing`: the CPU's decoder (a cache growing in place, finished rows leaving the batch).

The floor of a call: every decode step reads every weight once (the tied LM head's included) and
the KV cache written so far, at the bandwidth a device-to-device copy reaches here; nothing else.
Tokens are compared too: the graph replays the eager static step's kernels, so the two must
sample the same ids; the growing cache agrees to float rounding (the same in float32 on the CPU:
tests/test_static_decode.py).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from sapo_edge.backends.static_decode import StaticDecoder


def bandwidth() -> float:
    """Bytes per second a device-to-device copy of 1 GiB moves (read + written), best of 5."""
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y.copy_(x)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * x.numel() * x.element_size() / best


def floor_seconds(backend, rows: int, prompt: int, steps: int, bw: float) -> float:
    """Every weight once per step, and the KV cache so far, at `bw` bytes per second."""
    lm = backend.lm
    weights = sum(p.numel() * p.element_size() for p in lm.parameters())
    cfg = lm.config
    head = cfg.hidden_size // cfg.num_attention_heads
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head
    per_token *= torch.finfo(getattr(torch, backend.dtype)).bits // 8
    kv = sum(rows * (prompt + t) * per_token for t in range(steps))
    return (steps * weights + kv) / bw


@contextmanager
def mode(backend, name: str):
    """Decode the `name` way for the duration."""
    backend.static_decode = name != "growing"
    saved = StaticDecoder.capture_or_say
    if name == "static":
        StaticDecoder.capture_or_say = lambda self, log: None
    try:
        yield
    finally:
        StaticDecoder.capture_or_say = saved
        backend.static_decode = True


def kernels_per_step(backend, prompts) -> int | None:
    """CUDA kernels one eager decode step launches (torch.profiler), or None if it cannot say."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    b = backend
    b._activate()
    ids, mask = b._left_pad([b._prompt_ids(m) for m in prompts])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    from sapo_edge.backends.torch_decode import merged_lora

    with torch.inference_mode(), merged_lora(b.model, b.adapter, True, b.lean_lora):
        dec = StaticDecoder(b.model, b.lm, ids, mask, pos, 8, 8)
        dec.step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            dec.step()
            torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")


def compare(backend, prompts, n: int, new_tokens: int, bw: float) -> dict:
    """Seconds, tokens/s and the floor for each way, and whether their tokens agree."""
    gen = dict(max_new_tokens=new_tokens, temperature=1.0, top_p=1.0)
    out: dict = {}
    ids = {}
    for name in ("graph", "static", "growing"):
        with mode(backend, name):
            backend.generate(prompts, n, **{**gen, "max_new_tokens": 16}, seed=0)  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            groups = backend.generate(prompts, n, **gen, seed=1)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        ids[name] = [c.trained_ids for g in groups for c in g]
        tokens = sum(len(i) for i in ids[name])
        out[name] = {"s": round(seconds, 3), "tok_s": round(tokens / seconds), "tokens": tokens}
    steps = max(len(i) for i in ids["graph"])
    prompt = max(len(backend._prompt_ids(m)) for m in prompts)
    floor = floor_seconds(backend, len(ids["graph"]), prompt, steps, bw)
    out["floor_s"] = round(floor, 4)
    for name in ("graph", "static", "growing"):
        out[name]["x_floor"] = round(out[name]["s"] / floor, 1)
    out["graph_tokens_as_static"] = ids["graph"] == ids["static"]
    same = sum(a == b for a, b in zip(ids["graph"], ids["growing"], strict=True))
    out["rows_as_growing"] = f"{same}/{len(ids['graph'])}"
    out["kernels_per_step"] = kernels_per_step(backend, prompts)
    return out


def compiled_step_ms(backend, prompts, n: int = 8, steps: int = 50) -> dict:
    """What fusing the step's small ops would buy (an experiment, not a shipped path): one
    decoder's step run as a CUDA graph as shipped, then compiled by torch.compile (inductor's
    fused kernels, default mode) and captured as a graph too; milliseconds per step, each the
    mean of `steps` replays after a warm-up, and the compile's seconds."""
    from sapo_edge.backends.torch_decode import merged_lora

    b = backend
    b._activate()
    ids, mask = b._left_pad([b._prompt_ids(m) for m in prompts])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out: dict = {}
    with torch.inference_mode(), merged_lora(b.model, b.adapter, True, b.lean_lora):
        for name in ("graph", "compiled"):
            dec = StaticDecoder(b.model, b.lm, ids, mask, pos, n, steps + 8)
            t0 = time.perf_counter()
            if name == "compiled":
                dec.step = torch.compile(dec.step, dynamic=False)
                for _ in range(3):
                    dec.step()
                torch.cuda.synchronize()
            out[f"{name}_prepare_s"] = round(time.perf_counter() - t0, 1)
            dec.capture()
            for _ in range(3):
                dec.graph.replay()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                dec.graph.replay()
            torch.cuda.synchronize()
            out[f"{name}_ms_per_step"] = round(1000 * (time.perf_counter() - t0) / steps, 3)
    return out
