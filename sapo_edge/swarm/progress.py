"""What a member is doing right now (joining, loading its model, generating 40% of round 3,
training, done), for the class view's row from the moment the member is in the room, long before
its first round ends. Sent inside the stats envelope (stats.py: signed by the member, sealed for
the room, the same routes, replay and age checks) as a body with `progress` instead of `rounds`;
small (MAX_PROGRESS_BYTES), strictly validated, and rate-bounded per signer on its own budget.
A sender coalesces them (ProgressSender): at most one every PROGRESS_EVERY seconds, the newest;
and says its state again every PROGRESS_REPEAT seconds while nothing changes (a link that came up
since, a host that started late, still hears it; the row's "seen" stays fresh).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .protocol import MAX_REWARD, ProtocolError, check_fields

MAX_PROGRESS_BYTES = 1024  # the signed body of one progress message
PROGRESS_EVERY = 2.0  # seconds between a sender's progress messages (the newest state is sent)
PROGRESS_REPEAT = 10.0  # seconds after which an unchanged state is sent again
PROGRESS_PER_MINUTE = 45  # what a receiver accepts from one signer (an honest one sends <= 31)
MAX_COUNT = 100_000
# the trainer's phases (trainer.Node._phase) and the ones around them
PHASES = (
    "joining",  # admitted, its node starting
    "loading",  # loading its model
    "waiting",  # model loaded, waiting for a path to the class
    "sampling",
    "generating",
    "scoring",
    "sharing",
    "training",
    "saving",
    "paused",  # its training waits (p): the laptop is there, not training
    "done",  # its rounds are done
    "stopped",  # stopped (q, an error): it has left; its row stays
    "ended",  # the host: the class has ended (its goodbye; students heed only the host's)
    "code",  # the host: its join code in force now (`code`; students' exit summaries print it)
    "removed",  # the host: `member` is out of the class (every member drops it; it is told)
    "readmitted",  # the host: `member` may be in the class again
    "hinted",  # the host: `member` sees the worked example from its next round (the teacher's choice)
    "unhinted",  # the host: `member` no longer does
)
# the host's word about one member, named in `member`
MEMBER_PHASES = ("removed", "readmitted", "hinted", "unhinted")
ROLES = ("member", "baseline")
_FIELDS = {
    "phase": ("str", 16),
    "round": ("int", 0),
    "rounds": ("int", 0),
    "done": ("int", 0),
    "total": ("int", 0),
    "name": ("str", 40),
    "model": ("str", 120),
    "backend": ("str", 40),
    "device": ("str", 40),
    "role": ("str", 16),
    "reward": ("float", 0),
    "code": ("str", 120),
    "member": ("str", 32),
}
NOT_SCORED = -1.0  # `reward` before the round's answers are scored


@dataclass(frozen=True)
class Progress:
    """A member's claim about what it is doing; the class view shows it as such."""

    phase: str
    round: int = 0  # the round under way (0-based)
    rounds: int = 0  # rounds it plans (0: not known yet)
    done: int = 0  # steps of the phase done (generating: tokens, training: micro-batches)
    total: int = 0  # ...of this many (0: no count)
    name: str = ""
    model: str = ""
    backend: str = ""
    device: str = ""
    role: str = "member"
    reward: float = NOT_SCORED  # the round's own mean reward once its answers are scored
    code: str = ""  # phase "code": the host's join code in force ("" in every other phase)
    member: str = ""  # phases "removed", "readmitted": the member's node id ("" in the others)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _FIELDS}

    @classmethod
    def from_json(cls, obj: Any) -> Progress:
        """Validate a progress object from the network; only ProtocolError."""
        d = check_fields(obj, _FIELDS, "progress")
        if d["phase"] not in PHASES:
            raise ProtocolError("bad_value", f"progress.phase must be one of {', '.join(PHASES)}.")
        if d["role"] not in ROLES:
            raise ProtocolError("bad_value", f"progress.role must be one of {', '.join(ROLES)}.")
        for key in ("round", "rounds", "done", "total"):
            if d[key] > MAX_COUNT:
                raise ProtocolError("bad_value", f"progress.{key} is over {MAX_COUNT}.")
        if d["done"] > d["total"]:
            raise ProtocolError("bad_value", "progress.done is over progress.total.")
        if d["reward"] != NOT_SCORED and not 0.0 <= d["reward"] <= MAX_REWARD:
            raise ProtocolError("bad_value", f"progress.reward must be in [0, {MAX_REWARD}].")
        if d["member"] and (len(d["member"]) != 32 or d["member"].strip("0123456789abcdef")):
            raise ProtocolError("bad_value", "progress.member must be a node id (32 hex).")
        if bool(d["member"]) != (d["phase"] in MEMBER_PHASES):
            raise ProtocolError(
                "bad_value", "progress.member goes with the host's word about a member only."
            )
        for key in ("name", "model", "backend", "device", "code"):
            if not d[key].isprintable():
                raise ProtocolError("bad_value", f"progress.{key} holds control characters.")
        return cls(**{k: d[k] for k in _FIELDS if k != "reward"}, reward=float(d["reward"]))

    def describe(self) -> str:
        """'round 3 · generating 40%', 'loading the model', 'done after 10 rounds'."""
        pct = f" {100 * self.done // self.total}%" if self.total else ""
        if self.phase == "joining":
            return "joining"
        if self.phase == "loading":
            return "loading the model"
        if self.phase == "waiting":
            return "waiting for the class"
        if self.phase == "done":
            return f"done after {self.round} round{'s' if self.round != 1 else ''}"
        if self.phase == "stopped":
            return "left"
        if self.phase == "paused":
            return f"paused (round {self.round + 1} next)" if self.round else "paused"
        if self.phase == "ended":
            return "ended the class"
        if self.phase == "code":
            return "a new join code"
        if self.phase in MEMBER_PHASES:
            return _MEMBER_WORDS[self.phase]
        return f"round {self.round + 1} · {self.phase}{pct if self.phase in ('generating', 'training') else ''}"


_MEMBER_WORDS = {
    "removed": "removed a member",
    "readmitted": "readmitted a member",
    "hinted": "gave a member the worked example",
    "unhinted": "took the worked example from a member",
}


class ProgressSender:
    """Coalesces one node's progress: `offer` keeps the newest state and sends it at once when
    `every` seconds have passed since the last one, else once they have (`later(delay, fn)`
    schedules that, e.g. loop.call_later); the last state is sent again after `repeat` seconds
    without a new one. Confined to the thread that calls offer and runs `later`'s callbacks
    (the network loop)."""

    def __init__(
        self,
        send: Callable[[Progress], None],
        later: Callable[[float, Callable[[], None]], Any],
        *,
        every: float = PROGRESS_EVERY,
        repeat: float = PROGRESS_REPEAT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.send, self.later, self.every, self.clock = send, later, every, clock
        self.repeat = max(repeat, every)
        self.pending: Progress | None = None
        self.last: Progress | None = None
        self.last_sent = -1e18
        self.sent = 0  # messages sent (a repeat timer from before the newest one does nothing)
        self.scheduled = False

    def offer(self, p: Progress) -> None:
        self.pending = p
        wait = self.last_sent + self.every - self.clock()
        if wait <= 0:
            self.flush()
        elif not self.scheduled:
            self.scheduled = True
            self.later(wait, self._due)

    def _due(self) -> None:
        self.scheduled = False
        self.flush()

    def flush(self) -> None:
        if self.pending is not None:
            p, self.pending, self.last = self.pending, None, self.pending
            self.last_sent = self.clock()
            self.sent += 1
            self.send(p)
            self.later(self.repeat, lambda n=self.sent: self._again(n))

    def _again(self, sent: int) -> None:
        if sent == self.sent and self.pending is None and self.last is not None:
            self.pending = self.last
            self.flush()
