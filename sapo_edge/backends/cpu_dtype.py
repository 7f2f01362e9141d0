"""What `--dtype auto` on a CPU asks of the CPU (backends/rates.py decides, dtype_pace.py says why):
whether it has bfloat16 arithmetic of its own (AVX512-BF16 / AMX, or Arm's BF16 extension), and a
one-second GEMM probe of bfloat16's rate over float32's, cached per machine (CPU model, core
count, torch version) in the cache directory, which decides before any round ran here.

bfloat16 here means the frozen base weights and activations only: the LoRA weights and their AdamW
state stay float32 (peft keeps adapters in float32), and log-probs and the loss are reduced in
float32 (torch_loss._scaled).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..data import paths

PROBE_FILE = "cpu_dtype_probe.json"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def has_native_bf16() -> bool:
    """True when the CPU reports bfloat16 arithmetic of its own (not emulated in float32)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
        return any(f in flags.split() for f in ("avx512_bf16", "amx_bf16", "bf16"))
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"],
                capture_output=True,
                text=True,
                timeout=5,
            )
            return out.stdout.strip() == "1"
        except (OSError, subprocess.SubprocessError):
            return False
    return False


def gemm_speedup(seconds: float = 1.0) -> float:
    """bfloat16's GEMM rate over float32's at a decoder layer's shapes (a decode step's rows
    and a training micro-batch's), each dtype timed for about half of `seconds`."""
    shapes = [(32, 576, 1536), (512, 576, 1536)]

    def rate(dtype: torch.dtype) -> float:
        work = [
            (torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)) for m, k, n in shapes
        ]
        for x, w in work:
            torch.nn.functional.linear(x, w)  # warm
        flops, t0 = 0.0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 2:
            for x, w in work:
                torch.nn.functional.linear(x, w)
                flops += 2.0 * x.shape[0] * x.shape[1] * w.shape[0]
        return flops / (time.perf_counter() - t0)

    with torch.no_grad():
        return rate(torch.bfloat16) / rate(torch.float32)


def machine_key() -> str:
    return f"{cpu_model()} | {os.cpu_count()} cores | torch {torch.__version__}"


def probed_speedup(
    probe: Callable[[], float] = gemm_speedup,
    cache: Path | None = None,
    log: Callable[[str], None] = print,
) -> float:
    """bfloat16's GEMM rate over float32's on this machine: `probe` once, then its answer cached
    per machine in `cache` (a damaged file, or another machine's, probes again)."""
    cache = cache if cache is not None else paths.cache_dir() / PROBE_FILE
    key = machine_key()
    try:
        saved = json.loads(cache.read_text())
        if isinstance(saved, dict) and saved.get("machine") == key:
            return float(saved["bf16_speedup"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no probe yet, or a damaged file: probe again
    speedup = probe()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"machine": key, "bf16_speedup": speedup}) + "\n")
    except OSError:
        pass  # an unwritable cache only costs a probe next time
    log(f"dtype auto: bfloat16 GEMMs run at {speedup:.2f}x float32 on this CPU")
    return speedup
