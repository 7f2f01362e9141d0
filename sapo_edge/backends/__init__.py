"""Backends: select_backend() picks MLX, CUDA, MPS or CPU; frameworks are imported only inside their branch."""

from __future__ import annotations

import importlib.util
import platform
import sys
from collections.abc import Callable
from pathlib import Path

from ..config.settings import Config
from .base import Backend, Generation, Sample, StepStats

__all__ = [
    "Backend",
    "Generation",
    "Sample",
    "StepStats",
    "select_backend",
    "load_backend",
    "accelerator_memory",
]


def accelerator_memory(device: str):
    """A CUDA device's memory as memory.Memory (total, free, name); None for other devices."""
    if not device.startswith("cuda"):
        return None
    import torch

    from ..machine.memory import Memory

    free, total = torch.cuda.mem_get_info(device)
    return Memory(float(total), float(free), torch.cuda.get_device_name(device))


def select_backend(choice: str = "auto", log: Callable[[str], None] = print) -> tuple[str, str]:
    """Return (backend, device) for a --backend choice and say what was chosen and why."""
    apple = sys.platform == "darwin" and platform.machine() == "arm64"
    has_mlx = importlib.util.find_spec("mlx") is not None
    if choice == "mlx" or (choice == "auto" and apple and has_mlx):
        if not has_mlx:
            raise ValueError("--backend mlx needs MLX: pip install 'sapo-edge[mlx]'.")
        import mlx.core as mx

        device = "gpu" if mx.metal.is_available() else "cpu"
        why = (
            " - chosen because this is Apple Silicon with MLX installed" if choice == "auto" else ""
        )
        log(f"backend: mlx on {device}{why}")
        return "mlx", device
    import torch

    if choice in ("auto", "torch", "cuda") and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        log(
            f"backend: torch on cuda:0 ({name}){' - chosen because CUDA is available' if choice == 'auto' else ''}"
        )
        return "torch", "cuda:0"
    if choice == "cuda":
        raise ValueError(
            "--backend cuda: no CUDA GPU is visible to torch (check drivers / CUDA_VISIBLE_DEVICES) or use --backend cpu."
        )
    if choice in ("auto", "torch", "mps") and torch.backends.mps.is_available():
        log("backend: torch on mps (Apple GPU; install sapo-edge[mlx] for the faster MLX backend)")
        return "torch", "mps"
    if choice == "mps":
        raise ValueError(
            "--backend mps: the Apple GPU is not available to torch on this machine; use --backend cpu."
        )
    why = " - no CUDA or Apple GPU found" if choice == "auto" else ""
    log(f"backend: torch on cpu ({torch.get_num_threads()} threads){why}")
    return "torch", "cpu"


def load_backend(
    model_dir: Path,
    cfg: Config,
    adapter: str,
    device: str,
    log: Callable[[str], None] = print,
    kind: str = "torch",
) -> Backend:
    """A policy for one node (kind from select_backend). Nodes in one process that name the same
    model_dir and backend share its base weights."""
    if kind == "mlx":
        from .mlx_backend import MlxBackend

        return MlxBackend(model_dir, cfg, adapter=adapter, device=device, log=log)
    from .torch_backend import TorchBackend

    return TorchBackend(model_dir, cfg, adapter=adapter, device=device, log=log)
