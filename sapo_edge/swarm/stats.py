"""Per-round stats a member publishes for the class view: signed by the member (Ed25519 over the
exact body) and sealed for the room like a rollout batch, as their own message kind (`stats`).
Each message repeats the member's last few rounds, so a round sent while its links were down
(starting up, a laptop asleep) still reaches the class with the next one. The same envelope
carries a member's progress (progress.py: what it is doing now) as a body with `progress` in
place of `rounds`, smaller and on a rate budget of its own. Here: the figures of one round and
how a message is made. Checked on arrival by stats_intake.py (strictly validated and
size-capped; what is wrong with one is counted as `stats_<reason>` and charged like a bad batch:
the signer when it signed it, else the route that brought it); sent by stats_channel.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ..data.safejson import dumps_canonical
from .identity import Identity
from .progress import MAX_PROGRESS_BYTES, Progress
from .protocol import (  # MAX_REWARD: a round's figures and a progress's scored round alike
    MAX_REWARD,
    MAX_STATS_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
    check_fields,
    dump_message,
)
from .roomkey import RoomKeys

ROLES = ("member", "baseline")  # baseline: trains alone (J=0) as the class's solo reference
MAX_PRODUCERS = 64  # producers one round's "learned from" may name
ROUNDS_PER_MESSAGE = 8  # a message repeats up to this many recent rounds (the newest last)
MAX_COUNT = 100_000  # any count in one round's figures
_STATS = {
    "round": ("int", 0),
    "reward": ("float", 0),
    "shared": ("int", 0),
    "trained_local": ("int", 0),
    "trained_external": ("int", 0),
    "aha": ("int", 0),
    "learned": ("dict", 0),
    "name": ("str", 40),
    "model": ("str", 120),
    "backend": ("str", 40),
    "device": ("str", 40),
    "role": ("str", 16),
}
_HEX = set("0123456789abcdef")
_OPTIONAL = ("tagged", "strict")  # fractions in [0, 1]; a member may leave them out


def _optional(obj: Any) -> tuple[Any, dict[str, float]]:
    """The stats object without its optional fields, and those fields checked (ProtocolError)."""
    if not isinstance(obj, dict) or not any(k in obj for k in _OPTIONAL):
        return obj, {}
    said = {k: obj[k] for k in _OPTIONAL if k in obj}
    check_fields(said, {k: ("float", 0) for k in said}, "stats")
    for key, v in said.items():
        if not 0.0 <= float(v) <= 1.0:
            raise ProtocolError("bad_value", f"stats.{key} must be in [0, 1].")
    return {k: v for k, v in obj.items() if k not in said}, {k: float(v) for k, v in said.items()}


@dataclass(frozen=True)
class RoundStats:
    """What one member says about one of its rounds. Claims: the class view shows them as such."""

    round: int
    reward: float  # mean reward of its own completions (its own verifier)
    shared: int  # groups it published
    trained_local: int  # I: own groups trained on
    trained_external: int  # J: peers' groups trained on
    aha: int  # peer completions its verifier rewarded where all of its own failed
    learned: dict[str, tuple[int, int]]  # producer id -> (groups trained on, of those rewarded)
    name: str
    model: str
    backend: str
    device: str
    role: str = "member"
    # the round's share of answers in <answer> tags and its strict reward (right inside the
    # tags only), when it said them (an older member does not): what the Aha lesson shows
    tagged: float | None = None
    strict: float | None = None

    def to_json(self) -> dict[str, Any]:
        said = {
            k: v for k, v in (("tagged", self.tagged), ("strict", self.strict)) if v is not None
        }
        return {
            "round": self.round,
            "reward": self.reward,
            "shared": self.shared,
            "trained_local": self.trained_local,
            "trained_external": self.trained_external,
            "aha": self.aha,
            "learned": {k: list(v) for k, v in sorted(self.learned.items())},
            "name": self.name,
            "model": self.model,
            "backend": self.backend,
            "device": self.device,
            "role": self.role,
            **said,
        }

    @classmethod
    def from_json(cls, obj: Any) -> RoundStats:
        """Validate a stats object from the network (or class.jsonl); only ProtocolError."""
        d, said = _optional(obj)
        d = check_stats_fields(d, _STATS, "stats")
        for key in ("round", "shared", "trained_local", "trained_external", "aha"):
            if d[key] > MAX_COUNT:
                raise ProtocolError("bad_value", f"stats.{key} is over {MAX_COUNT}.")
        reward = float(d["reward"])
        if not 0.0 <= reward <= MAX_REWARD:
            raise ProtocolError("bad_value", f"stats.reward must be in [0, {MAX_REWARD}].")
        for key in ("name", "model", "backend", "device"):
            if not d[key].isprintable():
                raise ProtocolError("bad_value", f"stats.{key} holds control characters.")
        if d["role"] not in ROLES:
            raise ProtocolError("bad_value", f"stats.role must be one of {', '.join(ROLES)}.")
        learned = d["learned"]
        if len(learned) > MAX_PRODUCERS:
            raise ProtocolError("too_large", f"stats.learned names over {MAX_PRODUCERS} producers.")
        pairs: dict[str, tuple[int, int]] = {}
        for producer, pair in learned.items():
            if len(producer) != 32 or not set(producer) <= _HEX:
                raise ProtocolError("bad_value", "stats.learned keys must be node ids.")
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
                or not 0 <= pair[1] <= pair[0] <= MAX_COUNT
            ):
                raise ProtocolError(
                    "bad_value", "stats.learned values must be [trained, rewarded <= trained]."
                )
            pairs[producer] = (pair[0], pair[1])
        if sum(t for t, _ in pairs.values()) > d["trained_external"]:
            raise ProtocolError("bad_value", "stats.learned counts more groups than it trained.")
        return cls(
            d["round"],
            reward,
            d["shared"],
            d["trained_local"],
            d["trained_external"],
            d["aha"],
            pairs,
            d["name"],
            d["model"],
            d["backend"],
            d["device"],
            d["role"],
            said.get("tagged"),
            said.get("strict"),
        )


def check_stats_fields(obj: Any, spec: dict[str, tuple[str, int]], what: str) -> dict[str, Any]:
    """check_fields, plus "dict" fields (a JSON object) and "rounds" (a list of 1 to
    ROUNDS_PER_MESSAGE objects): present and of that shape; their contents the caller checks."""
    if not isinstance(obj, dict):
        raise ProtocolError("bad_type", f"a {what} must be a JSON object.")
    nested = {k: kind for k, (kind, _) in spec.items() if kind in ("dict", "rounds")}
    flat = {k: v for k, v in spec.items() if k not in nested}
    check_fields({k: v for k, v in obj.items() if k not in nested}, flat, what)
    for key, kind in nested.items():
        if key not in obj:
            raise ProtocolError("missing_field", f"{what} lacks {key}.")
        if kind == "dict" and not isinstance(obj[key], dict):
            raise ProtocolError("bad_type", f"{what}.{key} must be an object.")
        if kind == "rounds" and (
            not isinstance(obj[key], list) or not 0 < len(obj[key]) <= ROUNDS_PER_MESSAGE
        ):
            raise ProtocolError(
                "bad_type", f"{what}.{key} must be a list of 1 to {ROUNDS_PER_MESSAGE} rounds."
            )
    return obj


def make_stats(
    ident: Identity,
    keys: RoomKeys,
    rounds: RoundStats | list[RoundStats],
    *,
    stats_id: str | None = None,
    sent_at: float | None = None,
) -> tuple[bytes, str]:
    """Sign a member's recent rounds (the newest last; the oldest are left out while over the
    size limit) for the room; returns (envelope bytes, message id)."""
    recent = ([rounds] if isinstance(rounds, RoundStats) else list(rounds))[-ROUNDS_PER_MESSAGE:]
    stats_id = stats_id or os.urandom(16).hex()
    while True:
        body = _body(ident, keys, stats_id, sent_at, rounds=[r.to_json() for r in recent])
        raw = body.encode("utf-8")
        if len(raw) <= MAX_STATS_BYTES or len(recent) == 1:
            break
        recent = recent[1:]
    if len(raw) > MAX_STATS_BYTES:
        raise ValueError(f"stats of {len(raw)} bytes are over the {MAX_STATS_BYTES} limit.")
    return _signed(ident, body, raw), stats_id


def _body(
    ident: Identity, keys: RoomKeys, stats_id: str, sent_at: float | None, **payload: Any
) -> str:
    """A stats body: who, which room, when, and the figures or the progress."""
    return dumps_canonical(
        {
            "v": PROTOCOL_VERSION,
            "id": stats_id,
            "sender": ident.node_id,
            "room": keys.lan_id,
            "sent_at": time.time() if sent_at is None else sent_at,
            **payload,
        }
    )


def _signed(ident: Identity, body: str, raw: bytes) -> bytes:
    """The stats envelope around a body (figures or progress), signed by the sender."""
    return dump_message(
        {
            "type": "stats",
            "sender": ident.node_id,
            "public_key": ident.public_key.hex(),
            "body": body,
            "signature": ident.sign(raw).hex(),
        }
    )


def make_progress(
    ident: Identity,
    keys: RoomKeys,
    progress: Progress,
    *,
    stats_id: str | None = None,
    sent_at: float | None = None,
) -> tuple[bytes, str]:
    """Sign what this node is doing now for the room; returns (envelope bytes, message id)."""
    stats_id = stats_id or os.urandom(16).hex()
    body = _body(ident, keys, stats_id, sent_at, progress=progress.to_json())
    raw = body.encode("utf-8")
    if len(raw) > MAX_PROGRESS_BYTES:
        raise ValueError(f"progress of {len(raw)} bytes is over the {MAX_PROGRESS_BYTES} limit.")
    return _signed(ident, body, raw), stats_id
