"""This machine's speed for `pace.py`'s round estimates: a GEMM at a Qwen2.5-0.5B MLP's shape
and the memory bandwidth of a large reduction, in the dtype training will use (~1 s, cached per
machine in pace.json beside the dtype probe's answer)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch

from ..pace_cache import PaceCache, Rates
from ..threads import usable_cores
from .cpu_dtype import choose_cpu_dtype, machine_key
from .cpu_threads import TORCH_DEFAULT, set_threads


def measure_rates(dtype: torch.dtype, seconds: float = 1.0) -> Rates:
    """GEMM FLOP/s at (256 x 896) @ (896 x 4864), a training micro-batch's rows through an MLP
    projection, and bytes/s summing a 256 MB tensor (what a decode step does with the weights)."""
    with torch.no_grad():
        x, w = torch.randn(256, 896, dtype=dtype), torch.randn(4864, 896, dtype=dtype)
        torch.nn.functional.linear(x, w)
        flops, t0 = 0.0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 2:
            torch.nn.functional.linear(x, w)
            flops += 2.0 * 256 * 896 * 4864
        gemm = flops / (time.perf_counter() - t0)
        big = torch.ones(64 << 20, dtype=torch.float32)  # 256 MB: far past any cache
        big.sum()
        read, t0 = 0.0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 2:
            big.sum()
            read += big.numel() * 4
        bandwidth = read / (time.perf_counter() - t0)
    return Rates(gemm, bandwidth, torch.tensor([], dtype=dtype).element_size())


def cpu_pace(dtype_setting: str, log: Callable[[str], None]) -> tuple[Rates, PaceCache | None, str]:
    """(rates, the machine's pace cache, dtype name) for training on this CPU.
    SAPO_EDGE_PACE_RATES="GEMM_FLOPS,BYTES_PER_S" pins the rates and ignores what earlier rounds
    measured (the tests pin an AVX2 laptop's, so choices do not depend on the machine's load)."""
    if dtype_setting in ("float32", "bfloat16", "float16"):
        dtype = getattr(torch, dtype_setting)
    else:
        dtype = choose_cpu_dtype(log=log)
    name = str(dtype).removeprefix("torch.")
    pinned = os.environ.get("SAPO_EDGE_PACE_RATES", "").split(",")
    if len(pinned) == 2:
        try:
            gemm, bandwidth = float(pinned[0]), float(pinned[1])
            if gemm > 0 and bandwidth > 0:
                return (
                    Rates(gemm, bandwidth, torch.tensor([], dtype=dtype).element_size()),
                    None,
                    name,
                )
        except ValueError:
            pass
        log("SAPO_EDGE_PACE_RATES is not GEMM_FLOPS,BYTES_PER_S (e.g. 5e10,1e10): measuring")
    cache = PaceCache.load(machine_key())
    threads = min(usable_cores(), TORCH_DEFAULT)
    set_threads(threads)  # the probe runs with the cores an adaptive run starts with
    rates = cache.rates_for(rates_key(name, threads), lambda: measure_rates(dtype))
    return rates, cache, name


def rates_key(dtype: str, threads: int) -> str:
    """Rates are kept per dtype and thread count (a run pinned to fewer reads other ones)."""
    return f"{dtype}/{threads} threads"
