"""The Backend protocol: what the SAPO trainer needs from torch or MLX, and the data it passes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..config.loading import fields_where
from ..config.settings import Config

# generate() calls it after every decode step with (steps done, completion tokens so far);
# train_step() before every micro-batch with (micro-batches done, micro-batches in all).
# It may raise (a stop request) to abandon the call: nothing of it is kept.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Completion:
    """A completion exactly as it is scored and trained.

    `ids` are the completion's tokens without the end token: for this node's own rollouts the ids
    that were sampled, for a peer's the ids of its text tokenised here. `end_id` is the end token
    that closes it (for own rollouts the one sampled; for a peer's finished completion the chat
    template's end of turn), None when it was cut at max_new_tokens. `text` is `ids` decoded: the
    text that is scored and published, so the reward always belongs to the tokens trained.
    """

    text: str
    ids: tuple[int, ...]
    end_id: int | None

    @property
    def finished(self) -> bool:
        """True when an end token closes the completion (False: cut at max_new_tokens)."""
        return self.end_id is not None

    @property
    def tokens(self) -> int:
        """Completion tokens generated and trained, the end token included."""
        return len(self.ids) + self.finished

    @property
    def trained_ids(self) -> list[int]:
        """The ids the policy gradient sees: the body, then the end token when finished."""
        return [*self.ids, self.end_id] if self.end_id is not None else list(self.ids)


Generation = Completion  # what generate() returns: a completion as sampled


@dataclass(frozen=True)
class Sample:
    """One training sequence: a chat prompt, the completion's exact tokens and its advantage."""

    messages: list[dict[str, str]]
    completion: Completion
    advantage: float


@dataclass
class StepStats:
    loss: float
    sequences: int
    tokens: int  # completion tokens in the step's normaliser (zero-advantage completions included)
    clip_fraction: float  # share of tokens whose ratio was clipped
    grad_norm: float
    seconds: float
    extra: dict = field(default_factory=dict)


# Settings a backend fixes when it loads (`when="load"` in config/settings.py): changing them
# needs a restart (a new adapter or model).
LOAD_TIME_SETTINGS = fields_where(Config, "when", "load")


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
        progress: Progress | None = None,
    ) -> list[list[Completion]]:
        """n sampled completions for every chat prompt, all in one batched call with the KV cache;
        each keeps the sampled ids and the end token it emitted (None when cut at max_new_tokens)."""

    def encode_completion(self, text: str, *, finished: bool, max_new_tokens: int) -> Completion:
        """A peer's completion text as this node trains it: tokenised with special-token strings
        as plain text, cut to max_new_tokens (a cut completion is unfinished), closed with the chat
        template's end of turn when finished; its `text` is the ids decoded, the text to score."""

    def train_step(self, samples: list[Sample], progress: Progress | None = None) -> StepStats:
        """One optimizer step of the clipped GRPO/DAPO loss over all samples (micro-batched)."""

    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Per-token log-probs of each sample's completion (for tests, parity checks and eval)."""

    def reset(self, seed: int) -> None:
        """Fresh LoRA weights drawn from seed (the same on every backend) and a fresh optimizer."""

    def configure(self, cfg) -> None:
        """Use new run-time settings (learning rate, clipping, temperature, micro-batch...) from
        the next call; raise ValueError when one of LOAD_TIME_SETTINGS differs."""

    def save(self, directory: Path) -> None:
        """Write adapter (safetensors + config) and optimizer state into directory."""

    def load(self, directory: Path) -> None:
        """Restore what save() wrote; raise ValueError with a clear sentence if unusable."""

    def trainable_parameters(self) -> int: ...

    def close(self) -> None:
        """Release this node's adapter (and the base weights when no node uses them any more)."""

    def memory_report(self) -> dict[str, float]:
        """At least peak_rss_mb; accelerator figures where there is one."""


def check_load_time_settings(old, new) -> None:
    """Raise ValueError naming the settings a running backend cannot change."""
    changed = sorted(k for k in LOAD_TIME_SETTINGS if getattr(old, k) != getattr(new, k))
    if changed:
        raise ValueError(
            f"{', '.join(changed)} cannot change while the model is loaded: restart sapo-edge with the new value."
        )


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (ru_maxrss is KiB on Linux, bytes on macOS;
    Windows has no `resource` module: psutil's peak working set there)."""
    if sys.platform == "win32":
        import psutil

        return psutil.Process().memory_info().peak_wset / 2**20
    import resource  # POSIX only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
