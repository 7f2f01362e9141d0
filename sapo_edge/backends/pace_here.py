"""The pace choice on this machine (`pace.choose` with what is here): the backend it picks,
that device's memory and, on a CPU, its measured speed (a ~1 s probe, cached) and what its
earlier rounds took. Here in backends/ because it asks the backend; pace.py stays pure."""

from __future__ import annotations

from ..fit import system_memory
from ..models import available
from ..pace import ROUND_TARGET, Choice, choose
from . import accelerator_memory, select_backend


def choose_here(backend: str = "auto", dtype: str = "auto", target: float | None = None) -> Choice:
    """`choose` for this machine: its memory, and on a CPU its measured speed (a ~1 s probe,
    cached) and what its earlier rounds took."""
    kind, device = select_backend(backend, log=lambda _msg: None)
    rates = cache = None
    if kind == "torch" and device == "cpu":
        from .rates import cpu_pace

        rates, cache, _dtype = cpu_pace(dtype, log=lambda _msg: None)
    mem = accelerator_memory(device) or system_memory()
    return choose(mem, device, rates, cache, target=target or ROUND_TARGET, available=available)
