"""LoRA initial weights drawn from a seed without torch or MLX, so that two fresh runs with the same
node seed start from the same adapter, on either backend."""

from __future__ import annotations

import hashlib
import math

import numpy as np


def lora_a_init(peft_name: str, rank: int, in_features: int, seed: int) -> np.ndarray:
    """peft's lora_A (rank x in_features) for the weight named peft_name: uniform in
    +-1/sqrt(in_features) (peft's kaiming_uniform(a=sqrt(5)) and mlx-lm's init draw from the same
    range), from a stream keyed on (seed, name) so the order parameters are visited never matters.
    lora_B starts at zero, so a fresh adapter leaves the model unchanged."""
    key = int.from_bytes(hashlib.sha256(f"{seed}:{peft_name}".encode()).digest()[:8], "big")
    bound = 1 / math.sqrt(in_features)
    return np.random.default_rng(key).uniform(-bound, bound, (rank, in_features)).astype(np.float32)


def step_seed(seed: int, step: int) -> int:
    """The dropout seed of optimizer step `step` (only used when lora_dropout > 0)."""
    return (seed * 1_000_003 + step) % 2**31
