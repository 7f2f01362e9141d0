"""The Backend protocol: what the SAPO trainer needs from torch or MLX, and the data it passes."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: int  # completion tokens generated (EOS included)
    finished: bool  # False when cut at max_new_tokens


@dataclass(frozen=True)
class Sample:
    """One training sequence: a chat prompt, a completion (text, re-tokenised locally) and its advantage."""

    messages: list[dict[str, str]]
    completion: str
    advantage: float
    finished: bool = True  # an EOS token closes the completion


@dataclass
class StepStats:
    loss: float
    sequences: int
    tokens: int  # completion tokens that carried the loss
    clip_fraction: float  # share of tokens whose ratio was clipped
    grad_norm: float
    seconds: float
    extra: dict = field(default_factory=dict)


class Backend(Protocol):
    """One node's policy: a base model plus this node's LoRA adapter and optimizer."""

    name: str  # "torch" | "mlx"
    device: str  # "cpu", "cuda:0", "mps", "gpu"...
    dtype: str

    def generate(
        self,
        prompts: list[list[dict[str, str]]],
        n: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seed: int,
    ) -> list[list[Generation]]:
        """n sampled completions for every chat prompt, all in one batched call with the KV cache."""

    def train_step(self, samples: list[Sample]) -> StepStats:
        """One optimizer step of the clipped GRPO/DAPO loss over all samples (micro-batched)."""

    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Per-token log-probs of each sample's completion (for tests, parity checks and eval)."""

    def save(self, directory: Path) -> None:
        """Write adapter (safetensors + config) and optimizer state into directory."""

    def load(self, directory: Path) -> None:
        """Restore what save() wrote; raise ValueError with a clear sentence if unusable."""

    def trainable_parameters(self) -> int: ...

    def close(self) -> None:
        """Release this node's adapter (and the base weights when no node uses them any more)."""

    def memory_report(self) -> dict[str, float]:
        """At least peak_rss_mb; accelerator figures where there is one."""


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (ru_maxrss is KiB on Linux, bytes on macOS;
    Windows has no `resource` module: psutil's peak working set there)."""
    if sys.platform == "win32":
        import psutil

        return psutil.Process().memory_info().peak_wset / 2**20
    import resource  # POSIX only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
