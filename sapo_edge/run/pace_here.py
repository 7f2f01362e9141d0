"""The pace choice on this machine (`pace.choose` with what is here): the backend it picks,
that device's memory and, on a CPU, its measured speed (a ~1 s probe per dtype, cached), the
dtype each candidate would run in and what its earlier rounds took; and `--dtype auto`'s choice
said for `doctor`. Here in run/, above what it asks (backends/, models/, machine/pace.py), so
machine/pace.py stays pure arithmetic."""

from __future__ import annotations

from ..backends import accelerator_memory, select_backend
from ..config.settings import Config
from ..machine.fit import system_memory
from ..machine.pace import ROUND_TARGET, Choice, choose
from ..models.resolve import available


def choose_here(backend: str = "auto", dtype: str = "auto", target: float | None = None) -> Choice:
    """`choose` for this machine: its memory, and on a CPU its measured speed (a ~1 s probe,
    cached) in the dtype each candidate would run in, and what its earlier rounds took."""
    kind, device = select_backend(backend, log=lambda _msg: None)
    speed = None
    if kind == "torch" and device == "cpu":
        from ..backends.rates import cpu_pace

        def speed(model: str, cfg: Config):
            rates, _cache, name = cpu_pace(dtype, lambda _msg: None, model, cfg)
            return rates, name

    cache = None
    if speed is not None:
        from ..backends.rates import cpu_rates

        cache = cpu_rates((), lambda _msg: None)[1]
    mem = accelerator_memory(device) or system_memory()
    return choose(
        mem, device, None, cache, target=target or ROUND_TARGET, available=available, speed=speed
    )


def dtype_here(choice: Choice, backend: str = "auto", dtype: str = "auto") -> str:
    """One line: the dtype a run of `choice`'s candidate takes here and why (on a CPU with
    --dtype auto, the rounds it compared and where their figures came from)."""
    kind, device = select_backend(backend, log=lambda _msg: None)
    if dtype != "auto":
        return f"{dtype} (--dtype {dtype})"
    if kind == "mlx":
        from ..backends.mlx_backend import resolve_dtype as mlx_dtype

        name = str(mlx_dtype("auto")).rpartition(".")[2]
        return f"{name}: what --dtype auto takes with MLX on the {device}"
    if device != "cpu":
        from ..backends.torch_backend import resolve_dtype

        name = str(resolve_dtype("auto", device, lambda _m: None)).removeprefix("torch.")
        return f"{name}: what --dtype auto takes on {device}"
    from ..backends.rates import cpu_dtype_choice

    cfg = choice.candidate.config()
    return cpu_dtype_choice(cfg.model, cfg, lambda _msg: None).why
