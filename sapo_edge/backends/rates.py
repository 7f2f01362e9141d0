"""This machine's speed for `pace.py`'s round estimates: a GEMM at a Qwen2.5-0.5B MLP's shape
and the memory bandwidth of a large reduction, per dtype (~1 s each, cached per machine in
pace.json), and `--dtype auto`'s choice on a CPU from them (dtype_pace.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..config.settings import Config
from ..machine.dtype_pace import DTYPES, DtypeChoice, choose_dtype
from ..machine.pace_cache import PaceCache, Rates, rates_key
from ..machine.threads import usable_cores
from . import cpu_dtype
from .cpu_dtype import machine_key
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


def cpu_pace(
    dtype_setting: str,
    log: Callable[[str], None],
    model: str | None = None,
    cfg: Config | None = None,
) -> tuple[Rates, PaceCache | None, str]:
    """(rates, the machine's pace cache, dtype name) for training `model` with `cfg` on this CPU
    (`--dtype auto`: the dtype `cpu_dtype_choice` picks for them)."""
    if dtype_setting in ("float32", "bfloat16", "float16"):
        name = dtype_setting
    else:
        name = cpu_dtype_choice(model, cfg, log).dtype
    rates, cache = cpu_rates((name,), log)
    return rates[name], cache, name


def cpu_rates(
    dtypes: tuple[str, ...], log: Callable[[str], None]
) -> tuple[dict[str, Rates], PaceCache | None]:
    """This machine's rates in each dtype (a ~1 s probe each, cached per dtype and thread count in
    pace.json) and its pace cache. SAPO_EDGE_PACE_RATES="GEMM_FLOPS,BYTES_PER_S" pins the rates
    for every dtype and ignores what earlier rounds measured (no cache): the tests pin an AVX2
    laptop's, so choices do not depend on the machine's load."""
    pinned = os.environ.get("SAPO_EDGE_PACE_RATES", "").split(",")
    if len(pinned) == 2:
        try:
            gemm, bandwidth = float(pinned[0]), float(pinned[1])
            if gemm > 0 and bandwidth > 0:
                return {d: Rates(gemm, bandwidth, _size(d)) for d in dtypes}, None
        except ValueError:
            pass
        log("SAPO_EDGE_PACE_RATES is not GEMM_FLOPS,BYTES_PER_S (e.g. 5e10,1e10): measuring")
    cache = PaceCache.load(machine_key())
    threads = pace_threads()
    set_threads(threads)  # the probe runs with the cores an adaptive run starts with
    rates = {
        d: cache.rates_for(rates_key(d, threads), lambda d=d: measure_rates(getattr(torch, d)))
        for d in dtypes
    }
    return rates, cache


def pace_threads() -> int:
    """The threads an adaptive run starts with, which its rates are probed and kept under."""
    return min(usable_cores(), TORCH_DEFAULT)


def cpu_dtype_choice(
    model: str | None,
    cfg: Config | None,
    log: Callable[[str], None],
    *,
    native: Callable[[], bool] | None = None,
    probe: Callable[[], float] | None = None,
    probe_cache: Path | None = None,
) -> DtypeChoice:
    """`--dtype auto` on this CPU for `model` at `cfg`: SAPO_EDGE_CPU_DTYPE=float32|bfloat16 pins
    it (the tests pin it); float32 where the CPU has no bfloat16 arithmetic of its own; else the
    dtype whose round is measured (or estimated) faster here (dtype_pace.choose_dtype), the GEMM
    probe's ratio (cached in `probe_cache`) before any round ran."""
    pinned = os.environ.get("SAPO_EDGE_CPU_DTYPE", "").strip()
    if pinned in DTYPES:
        return DtypeChoice(pinned, f"{pinned}: pinned by SAPO_EDGE_CPU_DTYPE")
    if not (native or cpu_dtype.has_native_bf16)():
        return DtypeChoice("float32", "float32: this CPU has no bfloat16 arithmetic of its own")
    rates, cache = cpu_rates(DTYPES, log)
    probe = probe or cpu_dtype.gemm_speedup
    return choose_dtype(
        model,
        cfg or Config(),
        rates,
        cache,
        lambda: cpu_dtype.probed_speedup(probe, probe_cache, log),
    )


def _size(dtype: str) -> int:
    return torch.tensor([], dtype=getattr(torch, dtype)).element_size()
