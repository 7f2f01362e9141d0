"""The wire protocol between nodes (and the relay): hello, auth, rollouts, bye, as strict JSON.

Every message is parsed by `parse_message`, which only ever raises ProtocolError(reason) for bad
input. A rollouts message carries a signed body (its exact UTF-8 bytes are what the Ed25519
signature covers) and a room MAC, so a relay can forward batches but never forge them.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sapo_edge.rollout import DEFAULT_LIMITS, Limits, RolloutError, decode_batch
from sapo_edge.safejson import JsonError, dumps_canonical, loads_strict

from .identity import Identity, node_id_for_key, verify

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20  # one websocket message, everything included
MAX_DEPTH = 8  # envelopes are flat; the batch inside is a string parsed with its own limits
ROLES = ("node", "relay")


class ProtocolError(ValueError):
    """A message that is rejected; `reason` is a short code counted per peer."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def room_hash(room: str) -> str:
    """What discovery and hello show of a room name (the name itself is not sent)."""
    return hashlib.sha256(b"sapo-edge-room\0" + room.encode("utf-8")).hexdigest()[:16]


def room_key(room: str, secret: str) -> bytes:
    """The HMAC key that proves room membership; the secret never leaves the node."""
    return hashlib.sha256(
        b"sapo-edge-room-key\0" + room.encode("utf-8") + b"\0" + secret.encode("utf-8")
    ).digest()


def new_nonce() -> str:
    return os.urandom(16).hex()


# --- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    version: int
    role: str  # "node" or "relay"
    node_id: str
    public_key: bytes
    name: str
    room: str  # room_hash
    nonce: str  # the challenge the other side must sign
    model: str
    backend: str
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class Auth:
    signature: bytes  # Ed25519 over auth_transcript(the other side's nonce, my id, room)
    proof: bytes  # HMAC(room key, the same transcript)


@dataclass(frozen=True)
class Rollouts:
    sender: str
    public_key: bytes
    body: str  # canonical JSON text: {"batch","id","room","round","sender","sent_at","v"}
    signature: bytes  # Ed25519 over body.encode("utf-8")
    mac: bytes  # HMAC(room key, body bytes)


@dataclass(frozen=True)
class Bye:
    reason: str
    message: str


Message = Hello | Auth | Rollouts | Bye

_SPECS: dict[str, dict[str, tuple[str, int]]] = {
    # field -> (kind, cap); kinds: str, hex (exact length = cap), int, list
    "hello": {
        "type": ("str", 16),
        "version": ("int", 0),
        "role": ("str", 8),
        "node_id": ("hex", 32),
        "public_key": ("hex", 64),
        "name": ("str", 64),
        "room": ("hex", 16),
        "nonce": ("hex", 32),
        "model": ("str", 200),
        "backend": ("str", 40),
        "capabilities": ("list", 16),
    },
    "auth": {"type": ("str", 16), "signature": ("hex", 128), "proof": ("hex", 64)},
    "rollouts": {
        "type": ("str", 16),
        "sender": ("hex", 32),
        "public_key": ("hex", 64),
        "body": ("str", MAX_MESSAGE_BYTES),
        "signature": ("hex", 128),
        "mac": ("hex", 64),
    },
    "bye": {"type": ("str", 16), "reason": ("str", 40), "message": ("str", 500)},
}
_BODY = {
    "v": ("int", 0),
    "id": ("hex", 32),
    "sender": ("hex", 32),
    "room": ("hex", 16),
    "round": ("int", 0),
    "sent_at": ("float", 0),
    "batch": ("str", MAX_MESSAGE_BYTES),
}
_HEX = set("0123456789abcdef")


def _load(data: bytes | str, max_bytes: int) -> Any:
    try:
        return loads_strict(data, max_bytes=max_bytes, max_depth=MAX_DEPTH)
    except JsonError as e:
        raise ProtocolError(e.reason, str(e)) from None


def _check(obj: Any, spec: dict[str, tuple[str, int]], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ProtocolError("bad_type", f"a {what} must be a JSON object.")
    missing = [k for k in spec if k not in obj]
    if missing:
        raise ProtocolError("missing_field", f"{what} lacks {', '.join(missing)}.")
    extra = [str(k)[:40] for k in obj if k not in spec]
    if extra:
        raise ProtocolError("unknown_field", f"{what} has unknown field(s) {', '.join(extra[:5])}.")
    for key, (kind, cap) in spec.items():
        v = obj[key]
        if kind in ("str", "hex"):
            if not isinstance(v, str):
                raise ProtocolError("bad_type", f"{what}.{key} must be a string.")
            if kind == "hex" and (len(v) != cap or not set(v) <= _HEX):
                raise ProtocolError(
                    "bad_value", f"{what}.{key} must be {cap} lowercase hex characters."
                )
            if kind == "str" and len(v) > cap:
                raise ProtocolError(
                    "too_large", f"{what}.{key} has {len(v)} characters, over {cap}."
                )
        elif kind == "int":
            if not isinstance(v, int) or isinstance(v, bool):
                raise ProtocolError("bad_type", f"{what}.{key} must be an integer.")
            if not 0 <= v < 2**63:
                raise ProtocolError("bad_value", f"{what}.{key} must be a non-negative integer.")
        elif kind == "float":
            if not isinstance(v, int | float) or isinstance(v, bool):
                raise ProtocolError("bad_type", f"{what}.{key} must be a number.")
            if not math.isfinite(float(v)):
                raise ProtocolError("non_finite", f"{what}.{key} must be finite.")
        elif kind == "list":
            if not isinstance(v, list) or not all(isinstance(x, str) and len(x) <= 40 for x in v):
                raise ProtocolError("bad_type", f"{what}.{key} must be a list of short strings.")
            if len(v) > cap:
                raise ProtocolError("too_large", f"{what}.{key} has over {cap} entries.")
    return obj


def parse_message(data: bytes | str, max_bytes: int = MAX_MESSAGE_BYTES) -> Message:
    """Parse and validate one websocket message; only ProtocolError comes out for bad input."""
    obj = _load(data, max_bytes)
    if not isinstance(obj, dict):
        raise ProtocolError("bad_type", "a message must be a JSON object.")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in _SPECS:
        raise ProtocolError("unknown_type", f"message type must be one of {', '.join(_SPECS)}.")
    d = _check(obj, _SPECS[kind], kind)
    if kind == "hello":
        if d["version"] != PROTOCOL_VERSION:
            raise ProtocolError(
                "unknown_version",
                f"peer speaks protocol version {d['version']}; this node speaks {PROTOCOL_VERSION}: upgrade one side.",
            )
        if d["role"] not in ROLES:
            raise ProtocolError("bad_value", f"hello.role must be one of {', '.join(ROLES)}.")
        for key in ("name", "model", "backend"):
            if not d[key].isprintable():
                raise ProtocolError("bad_value", f"hello.{key} holds control characters.")
        pub = bytes.fromhex(d["public_key"])
        if node_id_for_key(pub) != d["node_id"]:
            raise ProtocolError("bad_identity", "hello.node_id is not the hash of its public key.")
        return Hello(
            d["version"],
            d["role"],
            d["node_id"],
            pub,
            d["name"],
            d["room"],
            d["nonce"],
            d["model"],
            d["backend"],
            tuple(d["capabilities"]),
        )
    if kind == "auth":
        return Auth(bytes.fromhex(d["signature"]), bytes.fromhex(d["proof"]))
    if kind == "rollouts":
        return Rollouts(
            d["sender"],
            bytes.fromhex(d["public_key"]),
            d["body"],
            bytes.fromhex(d["signature"]),
            bytes.fromhex(d["mac"]),
        )
    return Bye(d["reason"], d["message"])


# --- building messages ------------------------------------------------------------------------


def dump_message(obj: dict[str, Any]) -> bytes:
    return dumps_canonical(obj).encode("utf-8")


def make_hello(
    ident: Identity,
    room: str,
    nonce: str,
    *,
    model: str = "",
    backend: str = "",
    capabilities: tuple[str, ...] = ("rollouts/1",),
    role: str = "node",
    name: str | None = None,
) -> bytes:
    return dump_message(
        {
            "type": "hello",
            "version": PROTOCOL_VERSION,
            "role": role,
            "node_id": ident.node_id,
            "public_key": ident.public_key.hex(),
            "name": (name or ident.name)[:64],
            "room": room,
            "nonce": nonce,
            "model": model[:200],
            "backend": backend[:40],
            "capabilities": list(capabilities),
        }
    )


def auth_transcript(nonce: str, node_id: str, room: str) -> bytes:
    return f"sapo-edge-auth\0{nonce}\0{node_id}\0{room}".encode("ascii")


def make_auth(ident: Identity, peer_nonce: str, room: str, key: bytes) -> bytes:
    t = auth_transcript(peer_nonce, ident.node_id, room)
    return dump_message(
        {
            "type": "auth",
            "signature": ident.sign(t).hex(),
            "proof": hmac.new(key, t, hashlib.sha256).hexdigest(),
        }
    )


def check_auth(auth: Auth, hello: Hello, my_nonce: str, room: str, key: bytes | None) -> None:
    """Raise ProtocolError unless the peer signed my nonce (and, with key, knows the room key)."""
    t = auth_transcript(my_nonce, hello.node_id, room)
    if not verify(hello.public_key, auth.signature, t):
        raise ProtocolError("bad_signature", "the peer's auth signature does not verify.")
    if key is not None and not hmac.compare_digest(
        auth.proof, hmac.new(key, t, hashlib.sha256).digest()
    ):
        raise ProtocolError(
            "wrong_secret", "the peer does not know this room's secret (HMAC proof failed)."
        )


def make_bye(reason: str, message: str) -> bytes:
    return dump_message({"type": "bye", "reason": reason[:40], "message": message[:500]})


def make_rollouts(
    ident: Identity,
    room: str,
    key: bytes,
    batch: bytes,
    round_: int,
    *,
    batch_id: str | None = None,
    sent_at: float | None = None,
) -> tuple[bytes, str]:
    """Sign an encoded rollout batch for the room; returns (message bytes, batch id)."""
    batch_id = batch_id or os.urandom(16).hex()
    body = dumps_canonical(
        {
            "v": PROTOCOL_VERSION,
            "id": batch_id,
            "sender": ident.node_id,
            "room": room,
            "round": round_,
            "sent_at": time.time() if sent_at is None else sent_at,
            "batch": batch.decode("utf-8"),
        }
    )
    raw = body.encode("utf-8")
    msg = dump_message(
        {
            "type": "rollouts",
            "sender": ident.node_id,
            "public_key": ident.public_key.hex(),
            "body": body,
            "signature": ident.sign(raw).hex(),
            "mac": hmac.new(key, raw, hashlib.sha256).hexdigest(),
        }
    )
    return msg, batch_id


# --- verifying rollouts -----------------------------------------------------------------------


@dataclass(frozen=True)
class VerifiedBatch:
    batch_id: str
    sender: str
    round: int
    payload: bytes  # the encoded rollout batch, for Node._receive
    groups: int


def check_signed(msg: Rollouts) -> dict[str, Any]:
    """Identity + signature on the exact body bytes, then the body's schema (relay and nodes)."""
    if node_id_for_key(msg.public_key) != msg.sender:
        raise ProtocolError("bad_identity", "rollouts.sender is not the hash of its public key.")
    raw = msg.body.encode("utf-8", "surrogatepass")
    if not verify(msg.public_key, msg.signature, raw):
        raise ProtocolError("bad_signature", "the rollout batch's signature does not verify.")
    body = _check(_load(raw, MAX_MESSAGE_BYTES), _BODY, "rollouts body")
    if body["v"] != PROTOCOL_VERSION:
        raise ProtocolError(
            "unknown_version",
            f"rollouts body has version {body['v']}; expected {PROTOCOL_VERSION}.",
        )
    if body["sender"] != msg.sender:
        raise ProtocolError("bad_identity", "the signed body names another sender.")
    return body


class RolloutVerifier:
    """Checks signed batches for one room: signature, room, MAC, replay, staleness, producers.

    Thread-confined (the network loop). `seen` remembers batch ids and where they came from, so a
    batch that arrives twice by different routes (relay and LAN) is a duplicate, not a replay.
    """

    def __init__(
        self,
        room: str,
        key: bytes,
        *,
        window_s: float = 300.0,
        stale_rounds: int = 10,
        limits: Limits = DEFAULT_LIMITS,
        max_seen: int = 100_000,
    ) -> None:
        self.room, self.key, self.window_s = room, key, window_s
        self.stale_rounds, self.limits, self.max_seen = stale_rounds, limits, max_seen
        self.seen: OrderedDict[str, str] = OrderedDict()  # batch id -> route it first came by
        self.last_round: OrderedDict[str, int] = OrderedDict()  # sender -> highest round

    def verify(self, msg: Rollouts, route: str, now: float | None = None) -> VerifiedBatch | None:
        """A VerifiedBatch, None for a duplicate by another route, or ProtocolError."""
        body = check_signed(msg)
        raw = msg.body.encode("utf-8")
        if body["room"] != self.room:
            raise ProtocolError("wrong_room", "the batch was made for another room.")
        if not hmac.compare_digest(msg.mac, hmac.new(self.key, raw, hashlib.sha256).digest()):
            raise ProtocolError("wrong_secret", "the batch's room MAC fails: a different secret.")
        first = self.seen.get(body["id"])
        if first is not None:
            if first == route:
                raise ProtocolError("replay", "this batch id was already received from this peer.")
            return None
        now = time.time() if now is None else now
        if abs(now - float(body["sent_at"])) > self.window_s:
            raise ProtocolError(
                "expired", f"the batch was sent over {self.window_s:.0f} s from now (clock skew?)."
            )
        last = self.last_round.get(msg.sender)
        if last is not None and body["round"] < last - self.stale_rounds:
            raise ProtocolError(
                "stale_round", f"round {body['round']} is far behind the sender's round {last}."
            )
        payload = body["batch"].encode("utf-8")
        try:
            groups = decode_batch(payload, self.limits)
        except RolloutError as e:
            raise ProtocolError(e.reason, str(e)) from None
        if any(g.producer != msg.sender for g in groups):
            raise ProtocolError(
                "wrong_producer", "every group in a signed batch must name its signer as producer."
            )
        self.seen[body["id"]] = route
        while len(self.seen) > self.max_seen:
            self.seen.popitem(last=False)
        self.last_round[msg.sender] = max(body["round"], last or 0)
        self.last_round.move_to_end(msg.sender)
        while len(self.last_round) > 10_000:
            self.last_round.popitem(last=False)
        return VerifiedBatch(body["id"], msg.sender, body["round"], payload, len(groups))
