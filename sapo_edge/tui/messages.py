"""Small dataclass messages: the only way the training thread reaches the UI (`post_message`).

Each carries plain values (no node or backend objects), so a recorded list of them replays the
dashboard exactly (the snapshot tests do).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

from ..swarm.peers import PeerInfo


@dataclass
class NodeStarted(Message):
    """The header's facts, sent once the model is loaded."""

    name: str
    node_id: str
    room: str
    transport: str
    backend: str
    device: str
    dtype: str
    model: str
    lora_parameters: int
    memory_mb: float
    rounds: int
    local_samples: int
    external_samples: int
    history: list[tuple[int, float]] = field(default_factory=list)  # a resumed run's (round,
    # mean reward) from its metrics.jsonl, so the chart starts from them


@dataclass
class PhaseStarted(Message):
    round: int
    phase: str  # one of trainer.PHASES
    at: float  # unix time the phase started
    round_started: float  # unix time this round's first phase started
    expected_seconds: float | None  # the previous round's duration (None before the first)


@dataclass
class PhaseProgress(Message):
    """Progress inside the long phases: decode steps while generating, micro-batches training."""

    round: int
    phase: str  # "generating" | "training"
    done: int  # decode steps / micro-batches done
    total: int  # max_new_tokens / micro-batches of this train step
    tokens: int  # completion tokens generated so far (generating)
    rows: int  # completions generated at once (generating): questions x group size
    finished: int  # of those, completions that have ended (generating)
    at: float  # unix time


@dataclass
class NothingTrained(Message):
    """A round that trained on nothing: why, and what to change."""

    round: int
    why: str
    fix: str


@dataclass
class RoundDone(Message):
    round: int
    reward_mean: float
    swarm_reward: float | None  # mean reward producers claimed in groups received this round
    reward_by_domain: dict[str, float]
    gen_tokens: int
    gen_seconds: float
    round_seconds: float
    loss: float
    memory_mb: float
    local_used: int
    external_used: int
    received: int
    pool_size: int
    external_target: int | None = None  # mix adaptive: the J this node chose this round
    external_none: bool = False  # J=0 this round (a solo baseline): it trained none it received


@dataclass
class PeersUpdated(Message):
    peers: list[PeerInfo]
    now: float  # "last seen" is shown relative to this time
    source: str  # "transport" or "seen" (derived from groups this node received)


@dataclass
class Rollout:
    round: int
    domain: str
    question: str
    completion: str
    reward: float
    origin: str  # "local" or the peer's name / id
    aha: bool = False


@dataclass
class RolloutsSeen(Message):
    rollouts: list[Rollout] = field(default_factory=list)


@dataclass
class LogLine(Message):
    text: str


@dataclass
class Notice(Message):
    """A line to pop up now (RunEvents.on_notice): it reached the log as a LogLine already."""

    text: str


@dataclass
class SettingsApplied(Message):
    """Settings changed during the run took effect (RunEvents.on_settings)."""

    applied: dict


@dataclass
class PathChanged(Message):
    """Which paths carry this student to its class now (join's PathWatcher): the header's."""

    text: str


@dataclass
class RoundScored(Message):
    """The round's own answers are scored: its mean reward, before the train step."""

    round: int
    reward_mean: float


@dataclass
class Problem(Message):
    """An error or warning shown with its remedy; `fatal` ends the run."""

    title: str
    remedy: str
    fatal: bool = False
    detail: str = ""  # a traceback for the log pane, never shown in the main view
    after: str = ""  # the remedy as the exit summary says it, where it differs (the pane is gone)


@dataclass
class ProblemCleared(Message):
    """The warning with this title no longer holds (e.g. a path to the class works again)."""

    title: str


@dataclass
class Parked(Message):
    """The training loop is waiting in pause (True) or running again (False)."""

    parked: bool


@dataclass
class RunEnded(Message):
    outcome: str  # "done" | "stopped" | "failed"
