"""Rollout groups: the plain text nodes share (question, completions, metadata to regenerate the
task), with versioned JSON (de)serialisation that validates everything a peer sends.

Version 2 added `finished` (one flag per completion: an end token closed it, rather than the
producer's length limit); a version-1 batch is refused as "old_version".
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .safejson import JsonError, dumps_canonical, loads_strict
from .tasks import TaskError, TaskRef

ROLLOUT_VERSION = 2


class RolloutError(ValueError):
    """A rollout or batch that cannot be accepted; `reason` is a short code counted per peer."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """Caps on what one peer may send; anything over a cap is rejected as "too_large"."""

    max_completions: int = 64
    max_completion_chars: int = 16_000
    max_question_chars: int = 16_000
    max_answer_chars: int = 2_000
    max_id_chars: int = 128
    max_groups_per_batch: int = 256
    max_batch_bytes: int = 1 << 20


DEFAULT_LIMITS = Limits()

_FIELDS = (
    "version",
    "task_ref",
    "question",
    "reference_answer",
    "completions",
    "finished",
    "rewards",
    "producer",
    "model",
    "round",
    "created_at",
)


@dataclass(frozen=True)
class RolloutGroup:
    """One question and the L completions a node's policy generated for it."""

    task_ref: TaskRef
    question: str
    reference_answer: str | None  # producer's claim; receivers ignore it and regenerate
    completions: tuple[str, ...]
    rewards: tuple[float, ...]  # producer's rewards; receivers re-score
    producer: str  # node id
    model: str  # model id, e.g. "Qwen/Qwen2.5-0.5B-Instruct"
    round: int  # producer's round
    created_at: float  # unix seconds
    # per completion: True when an end token closed it, False when cut at the producer's
    # max_new_tokens (a receiver then appends no end token). Not given: all False, the cautious
    # reading (nothing teaches the model to stop where the producer did not); producers send it.
    finished: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        if self.finished is None:
            object.__setattr__(self, "finished", (False,) * len(self.completions))

    @property
    def group_id(self) -> str:
        """32 hex chars over (task, completions): the same content re-sent or relayed has one id."""
        payload = json.dumps([self.task_ref.key, list(self.completions)], separators=(",", ":"))
        return hashlib.sha256(payload.encode("ascii")).hexdigest()[:32]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": ROLLOUT_VERSION,
            "task_ref": self.task_ref.to_dict(),
            "question": self.question,
            "reference_answer": self.reference_answer,
            "completions": list(self.completions),
            "finished": list(self.finished),
            "rewards": list(self.rewards),
            "producer": self.producer,
            "model": self.model,
            "round": self.round,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, d: Any, limits: Limits = DEFAULT_LIMITS) -> RolloutGroup:
        """Validate a decoded group strictly; raise RolloutError with a reason code on any fault."""
        if not isinstance(d, dict):
            raise RolloutError(
                "bad_type", f"a rollout group must be a JSON object, not {_kind(d)}."
            )
        _check_version(d, "rollout group")
        missing = [f for f in _FIELDS if f not in d]
        if missing:
            raise RolloutError(
                "missing_field",
                f"rollout group lacks field(s) {', '.join(missing)}; send all of {', '.join(_FIELDS)}.",
            )
        extra = sorted(str(k) for k in d if k not in _FIELDS)
        if extra:
            raise RolloutError(
                "unknown_field",
                f"rollout group has unknown field(s) {', '.join(x[:40] for x in extra[:5])}; send only {', '.join(_FIELDS)}.",
            )

        try:
            task_ref = TaskRef.from_dict(d["task_ref"])
        except TaskError as e:
            raise RolloutError("bad_task_ref", f"rollout group has a bad task_ref: {e}.") from None
        _cap(task_ref.dataset, limits.max_id_chars, "task_ref.dataset")

        question = _str(d["question"], "question")
        _cap(question, limits.max_question_chars, "question")
        answer = d["reference_answer"]
        if answer is not None:
            _cap(_str(answer, "reference_answer"), limits.max_answer_chars, "reference_answer")

        completions, rewards = d["completions"], d["rewards"]
        if not isinstance(completions, list) or not isinstance(rewards, list):
            raise RolloutError("bad_type", "completions and rewards must be JSON arrays.")
        if len(completions) > limits.max_completions:
            raise RolloutError(
                "too_large",
                f"rollout group has {len(completions)} completions, over the limit of {limits.max_completions}.",
            )
        if len(completions) < 2:
            raise RolloutError(
                "bad_shape",
                f"rollout group has {len(completions)} completion(s); a group needs at least 2 to compare.",
            )
        if len(rewards) != len(completions):
            raise RolloutError(
                "bad_shape",
                f"rollout group has {len(completions)} completions but {len(rewards)} rewards; send one reward per completion.",
            )
        for i, c in enumerate(completions):
            _cap(_str(c, f"completions[{i}]"), limits.max_completion_chars, f"completions[{i}]")
        finished = d["finished"]
        if not isinstance(finished, list) or not all(isinstance(f, bool) for f in finished):
            raise RolloutError(
                "bad_type", "finished must be a JSON array of true/false, one per completion."
            )
        if len(finished) != len(completions):
            raise RolloutError(
                "bad_shape",
                f"rollout group has {len(completions)} completions but {len(finished)} finished flags; send one per completion.",
            )
        floats = tuple(_finite(r, f"rewards[{i}]") for i, r in enumerate(rewards))

        producer, model = _str(d["producer"], "producer"), _str(d["model"], "model")
        for name, value in (("producer", producer), ("model", model)):
            _cap(value, limits.max_id_chars, name)
            if not value:
                raise RolloutError(
                    "bad_value", f"rollout group has an empty {name}; send a non-empty id."
                )
        rnd = d["round"]
        if not isinstance(rnd, int) or isinstance(rnd, bool):
            raise RolloutError("bad_type", f"round must be an integer, not {_kind(rnd)}.")
        if not 0 <= rnd < 2**63:
            raise RolloutError(
                "bad_value", f"round is {_show(rnd)}; it must be a non-negative integer."
            )

        return cls(
            task_ref=task_ref,
            question=question,
            reference_answer=answer,
            completions=tuple(completions),
            rewards=floats,
            producer=producer,
            model=model,
            round=rnd,
            created_at=_finite(d["created_at"], "created_at"),
            finished=tuple(finished),
        )


class Batch(bytes):
    """An encoded rollout batch that carries the groups it decodes to, so that it is decoded
    once on its way: encode_batch makes one from what it checked, the network's verifier from
    what it decoded, and publish and the trainer read `groups` (groups_of) instead of parsing
    the bytes again. Its bytes are the wire format: a copy (`bytes(batch)`) is plain bytes."""

    groups: tuple[RolloutGroup, ...]

    def __new__(cls, data: bytes, groups: Sequence[RolloutGroup]) -> Batch:
        batch = super().__new__(cls, data)
        batch.groups = tuple(groups)
        return batch

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle keep the groups
        return (Batch, (bytes(self), self.groups))

    @functools.cached_property
    def footprint(self) -> int:
        """The memory it holds, its bytes and its groups' objects (what a byte-bounded queue of
        batches counts: decoded text takes a few times its wire size)."""
        return sys.getsizeof(bytes(self)) + sum(map(_held, self.groups))


def _held(g: RolloutGroup) -> int:
    """A group's objects' bytes, near enough: the group, its strings, tuples, numbers and task."""
    texts = (g.question, g.reference_answer or "", g.producer, g.model, *g.completions)
    tuples = (g.completions, g.rewards, g.finished or ())
    numbers = 32 * (len(g.rewards) + len(g.finished or ()) + 2)
    task = sys.getsizeof(g.task_ref.key) * 3  # its id, params and their objects, roughly
    return sys.getsizeof(g) + 64 + sum(map(sys.getsizeof, texts + tuples)) + numbers + task


def groups_of(payload: bytes | str, limits: Limits = DEFAULT_LIMITS) -> list[RolloutGroup]:
    """The groups of an encoded batch: a Batch's own (decoded once already), else decoded now
    (decode_batch, with its errors)."""
    if isinstance(payload, Batch):
        return list(payload.groups)
    return decode_batch(payload, limits)


def encode_batch(groups: Sequence[RolloutGroup], limits: Limits = DEFAULT_LIMITS) -> Batch:
    """UTF-8 JSON {"version": ROLLOUT_VERSION, "groups": [...]}; refuses anything decode_batch would
    reject: its bytes are checked with the peers' own parser (decode_batch, once, here), and the
    Batch carries the groups that parse gave."""
    if len(groups) > limits.max_groups_per_batch:
        raise RolloutError(
            "too_large",
            f"batch has {len(groups)} groups, over the limit of {limits.max_groups_per_batch}; split it.",
        )
    dicts = [g.to_dict() for g in groups]
    for d in dicts:
        RolloutGroup.from_dict(d, limits)  # a group's own checks first (a NaN cannot be dumped)
    data = dumps_canonical({"version": ROLLOUT_VERSION, "groups": dicts}).encode("utf-8")
    if len(data) > limits.max_batch_bytes:
        raise RolloutError(
            "too_large",
            f"batch is {len(data)} bytes, over the {limits.max_batch_bytes}-byte limit; split it.",
        )
    return Batch(data, decode_batch(data, limits))  # never publish what a peer would reject


def decode_batch(data: bytes | str, limits: Limits = DEFAULT_LIMITS) -> list[RolloutGroup]:
    """Parse and validate a peer's batch; only RolloutError ever comes out for bad input."""
    try:
        obj = loads_strict(data, max_bytes=limits.max_batch_bytes)
    except JsonError as e:
        raise RolloutError(e.reason, f"rollout batch rejected: {e}") from None
    if not isinstance(obj, dict):
        raise RolloutError("bad_type", f"a rollout batch must be a JSON object, not {_kind(obj)}.")
    _check_version(obj, "rollout batch")
    if "groups" not in obj:
        raise RolloutError(
            "missing_field", "rollout batch lacks field groups; send {version, groups}."
        )
    extra = sorted(str(k) for k in obj if k not in ("version", "groups"))
    if extra:
        raise RolloutError(
            "unknown_field",
            f"rollout batch has unknown field(s) {', '.join(x[:40] for x in extra[:5])}; send only version and groups.",
        )
    groups = obj["groups"]
    if not isinstance(groups, list):
        raise RolloutError(
            "bad_type", f"rollout batch groups must be an array, not {_kind(groups)}."
        )
    if len(groups) > limits.max_groups_per_batch:
        raise RolloutError(
            "too_large",
            f"batch has {len(groups)} groups, over the limit of {limits.max_groups_per_batch}.",
        )
    out = []
    for i, g in enumerate(groups):
        try:
            out.append(RolloutGroup.from_dict(g, limits))
        except RolloutError as e:
            raise RolloutError(e.reason, f"group {i}: {e}") from None
    return out


# --- small validators -------------------------------------------------------------------------


def _kind(v: Any) -> str:
    for t, name in (
        (dict, "an object"),
        (list, "an array"),
        (str, "a string"),
        (bool, "a boolean"),
    ):
        if isinstance(v, t):
            return name
    if v is None:
        return "null"
    return "a number" if isinstance(v, int | float) else type(v).__name__


def _show(v: Any) -> str:
    """A short repr that is safe for any value (huge ints have no cheap repr)."""
    if isinstance(v, bool | float) or v is None or (isinstance(v, int) and abs(v) < 10**18):
        return repr(v)
    return f"an integer of {v.bit_length()} bits" if isinstance(v, int) else _kind(v)


def _check_version(d: dict[str, Any], what: str) -> None:
    if "version" not in d:
        raise RolloutError(
            "missing_field", f"{what} lacks field version; send version {ROLLOUT_VERSION}."
        )
    v = d["version"]
    if isinstance(v, int) and not isinstance(v, bool) and 1 <= v < ROLLOUT_VERSION:
        raise RolloutError(
            "old_version",
            f"{what} has version {v}, from an older sapo-edge that does not say which completions "
            f"finished; this node speaks version {ROLLOUT_VERSION}: upgrade sapo-edge on that node.",
        )
    if v != ROLLOUT_VERSION or isinstance(v, bool) or not isinstance(v, int):
        raise RolloutError(
            "unknown_version",
            f"{what} has version {_show(v)}; this node speaks version {ROLLOUT_VERSION}, upgrade one side.",
        )


def _str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise RolloutError("bad_type", f"{name} must be a string, not {_kind(v)}.")
    return v


def _cap(s: str, limit: int, name: str) -> None:
    if len(s) > limit:
        raise RolloutError(
            "too_large", f"{name} has {len(s)} characters, over the limit of {limit}."
        )


def _finite(v: Any, name: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise RolloutError("bad_type", f"{name} must be a number, not {_kind(v)}.")
    try:
        x = float(v)
    except OverflowError:  # an int too big for a float
        x = math.inf
    if not math.isfinite(x):
        raise RolloutError("non_finite", f"{name} is {_show(v)}; it must be a finite number.")
    return x
