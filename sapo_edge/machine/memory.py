"""How much memory a model may use here, as one small type: below both `fit.py`, which checks an
estimate against it, and `backends/`, which reads a GPU's."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Memory:
    total: float  # bytes the model can use: RAM, or the GPU's memory on CUDA
    available: float  # free now
    where: str  # "RAM" or the GPU's name
