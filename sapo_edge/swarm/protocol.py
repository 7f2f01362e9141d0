"""The wire protocol's messages as strict JSON: hello (plain, the only thing a stranger sees),
auth (inside the encrypted link), bye (a reason from a fixed set), rollouts (a signed batch,
carried inside a sealed box: see batches.py), stats (a member's signed per-round figures for the
class view, sealed the same way: see stats.py), rekey (a class's host's new room secret, inside
one member's encrypted link: keyring.py).

Every message is parsed by `parse_message`, which only ever raises ProtocolError(reason) for bad
input. The handshake that uses hello and auth is in handshake.py.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from ..data.safejson import JsonError, dumps_canonical, loads_strict
from .identity import Identity, node_id_for_key

PROTOCOL_VERSION = 3  # 3: a round's stats may say its share in tags and strict reward
MAX_HANDSHAKE_BYTES = 4096  # a hello or an auth: refused unparsed when longer
MAX_MESSAGE_BYTES = 1 << 20  # one signed rollouts envelope, everything included
MAX_STATS_BYTES = 16 << 10  # the body of one signed stats message
MAX_REWARD = 2.0  # rewards are in [0, 1 + format bonus] and the bonus is at most 1 (rewards.py)
MAX_DEPTH = 8  # envelopes are flat; the batch inside is a string parsed with its own limits
ROLES = ("node", "relay")

# Every reason this code counts or says in a bye. A peer's bye with any other reason is read as
# "other": what a peer chooses never becomes a new counter key.
REASONS = frozenset(
    """shutdown muted duplicate_connection replaced same_identity wrong_room wrong_secret
    wrong_node bad_role unknown_version bad_signature bad_identity bad_frame bad_value bad_type
    bad_json bad_utf8 bad_unicode too_large too_deep non_finite huge_int duplicate_key
    missing_field unknown_field unknown_type unexpected_message timeout closed no_pong ws_error
    busy no_such_code expired_code wrong_code rate_limited class_full replay expired stale_round
    wrong_producer wrong_sender evicted refused removed other""".split()
)


class ProtocolError(ValueError):
    """A message that is rejected; `reason` is a short code counted per peer."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def new_nonce() -> str:
    return os.urandom(16).hex()


def known_reason(reason: str) -> str:
    return reason if reason in REASONS else "other"


# --- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """The first message each side sends, in the clear: only what mDNS shows anyway."""

    version: int
    role: str  # "node" or "relay"
    node_id: str
    public_key: bytes  # Ed25519 identity key
    room: str  # the room's lan id (node to node) or relay route (node to relay)
    nonce: str
    ephemeral: bytes  # X25519 key for this session only


@dataclass(frozen=True)
class Auth:
    """Sent inside the encrypted link: the signature over the transcript and who this peer is."""

    signature: bytes  # Ed25519 over auth_data(role, transcript hash)
    name: str
    model: str
    backend: str
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class Rollouts:
    sender: str
    public_key: bytes
    body: str  # canonical JSON text: {"batch","id","room","round","sender","sent_at","v"}
    signature: bytes  # Ed25519 over body.encode("utf-8")


@dataclass(frozen=True)
class Stats:
    """A member's per-round figures (stats.py); the same envelope as Rollouts, a small body."""

    sender: str
    public_key: bytes
    body: str  # canonical JSON text: {"id","room","rounds","sender","sent_at","v"}
    signature: bytes  # Ed25519 over body.encode("utf-8")


@dataclass(frozen=True)
class Bye:
    reason: str  # always one of REASONS
    message: str


@dataclass(frozen=True)
class Rekey:
    """A class's host's new room secret (RoomKeys.replaced), sent only inside an encrypted link
    to a member it admitted; heeded from the host alone (room_secret.py)."""

    secret: bytes
    age: int  # seconds since the host replaced the keys: what is left of a member's grace


Message = Hello | Auth | Rollouts | Stats | Bye | Rekey

_SPECS: dict[str, dict[str, tuple[str, int]]] = {
    # field -> (kind, cap); kinds: str, hex (exact length = cap), int, list
    "hello": {
        "type": ("str", 16),
        "version": ("int", 0),
        "role": ("str", 8),
        "node_id": ("hex", 32),
        "public_key": ("hex", 64),
        "room": ("hex", 32),
        "nonce": ("hex", 32),
        "ephemeral": ("hex", 64),
    },
    "auth": {
        "type": ("str", 16),
        "signature": ("hex", 128),
        "name": ("str", 64),
        "model": ("str", 200),
        "backend": ("str", 40),
        "capabilities": ("list", 16),
    },
    "rollouts": {
        "type": ("str", 16),
        "sender": ("hex", 32),
        "public_key": ("hex", 64),
        "body": ("str", MAX_MESSAGE_BYTES),
        "signature": ("hex", 128),
    },
    "stats": {
        "type": ("str", 16),
        "sender": ("hex", 32),
        "public_key": ("hex", 64),
        "body": ("str", MAX_STATS_BYTES),
        "signature": ("hex", 128),
    },
    "bye": {"type": ("str", 16), "reason": ("str", 40), "message": ("str", 500)},
    "rekey": {"type": ("str", 16), "secret": ("hex", 64), "age": ("int", 0)},
}
_HEX = set("0123456789abcdef")


def load(data: bytes | str, max_bytes: int) -> Any:
    try:
        return loads_strict(data, max_bytes=max_bytes, max_depth=MAX_DEPTH)
    except JsonError as e:
        raise ProtocolError(e.reason, str(e)) from None


def check_fields(obj: Any, spec: dict[str, tuple[str, int]], what: str) -> dict[str, Any]:
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
            try:
                finite = math.isfinite(float(v))
            except OverflowError:  # an integer past float's range (a file read by json.loads)
                finite = False
            if not finite:
                raise ProtocolError("non_finite", f"{what}.{key} must be finite.")
        elif kind == "list":
            if not isinstance(v, list) or not all(isinstance(x, str) and len(x) <= 40 for x in v):
                raise ProtocolError("bad_type", f"{what}.{key} must be a list of short strings.")
            if len(v) > cap:
                raise ProtocolError("too_large", f"{what}.{key} has over {cap} entries.")
    return obj


def parse_message(data: bytes | str, max_bytes: int = MAX_MESSAGE_BYTES) -> Message:
    """Parse and validate one message; only ProtocolError comes out for bad input."""
    obj = load(data, max_bytes)
    if not isinstance(obj, dict):
        raise ProtocolError("bad_type", "a message must be a JSON object.")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in _SPECS:
        raise ProtocolError("unknown_type", f"message type must be one of {', '.join(_SPECS)}.")
    d = check_fields(obj, _SPECS[kind], kind)
    if kind == "hello":
        if d["version"] != PROTOCOL_VERSION:
            raise ProtocolError(
                "unknown_version",
                f"peer speaks protocol version {d['version']}; this node speaks {PROTOCOL_VERSION}: upgrade one side.",
            )
        if d["role"] not in ROLES:
            raise ProtocolError("bad_value", f"hello.role must be one of {', '.join(ROLES)}.")
        pub = bytes.fromhex(d["public_key"])
        if node_id_for_key(pub) != d["node_id"]:
            raise ProtocolError("bad_identity", "hello.node_id is not the hash of its public key.")
        return Hello(
            d["version"],
            d["role"],
            d["node_id"],
            pub,
            d["room"],
            d["nonce"],
            bytes.fromhex(d["ephemeral"]),
        )
    if kind == "auth":
        for key in ("name", "model", "backend"):
            if not d[key].isprintable():
                raise ProtocolError("bad_value", f"auth.{key} holds control characters.")
        return Auth(
            bytes.fromhex(d["signature"]),
            d["name"],
            d["model"],
            d["backend"],
            tuple(d["capabilities"]),
        )
    if kind in ("rollouts", "stats"):
        return (Rollouts if kind == "rollouts" else Stats)(
            d["sender"], bytes.fromhex(d["public_key"]), d["body"], bytes.fromhex(d["signature"])
        )
    if kind == "rekey":
        return Rekey(bytes.fromhex(d["secret"]), d["age"])
    return Bye(known_reason(d["reason"]), d["message"])


# --- building messages ------------------------------------------------------------------------


def dump_message(obj: dict[str, Any]) -> bytes:
    return dumps_canonical(obj).encode("utf-8")


def make_hello(ident: Identity, room: str, nonce: str, ephemeral: bytes, role: str = "node"):
    return dump_message(
        {
            "type": "hello",
            "version": PROTOCOL_VERSION,
            "role": role,
            "node_id": ident.node_id,
            "public_key": ident.public_key.hex(),
            "room": room,
            "nonce": nonce,
            "ephemeral": ephemeral.hex(),
        }
    )


def auth_data(role: str, transcript: bytes) -> bytes:
    """What a side signs: its role in this session and the hash of both hellos."""
    return b"sapo-edge/2 auth\0" + role.encode("ascii") + b"\0" + transcript


def make_auth(
    ident: Identity,
    role: str,
    transcript: bytes,
    *,
    name: str = "",
    model: str = "",
    backend: str = "",
    capabilities: tuple[str, ...] = ("rollouts/2",),
) -> bytes:
    return dump_message(
        {
            "type": "auth",
            "signature": ident.sign(auth_data(role, transcript)).hex(),
            "name": (name or ident.name)[:64],
            "model": model[:200],
            "backend": backend[:40],
            "capabilities": list(capabilities),
        }
    )


def make_rekey(secret: bytes, age: float) -> bytes:
    return dump_message({"type": "rekey", "secret": secret.hex(), "age": int(age)})


def make_bye(reason: str, message: str) -> bytes:
    return dump_message({"type": "bye", "reason": known_reason(reason), "message": message[:500]})
