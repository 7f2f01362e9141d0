"""What the trainer's helpers (checkpoints, state, settings, metrics) read of the Node they
serve: rl/trainer.py's Node has all of it, and they cannot import it (it imports them)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..backends.base import Backend
from ..config.settings import Config
from ..data.task_sampler import TaskSampler
from ..events import RunEvents
from ..swarm.transport import Transport
from .pool import ExternalPool
from .rewards import RewardConfig


class NodeParts(Protocol):
    cfg: Config
    backend: Backend
    transport: Transport
    node_id: str
    name: str
    model_id: str
    out_dir: Path
    callback: RunEvents
    sampler: TaskSampler
    pool: ExternalPool
    rewards: RewardConfig
    round: int  # the round under way (0-based)
    saved: tuple[int, Path] | None  # (round, checkpoint) saved or resumed last
    _received_carry: int  # groups received by a stopped attempt of the round

    @property
    def metrics_path(self) -> Path: ...

    @property
    def checkpoint_dir(self) -> Path: ...
