"""Rollout batches on the wire: signed by their producer (Ed25519 over the exact body bytes),
then sealed for the room (ChaCha20-Poly1305 under the room's batch key), so a relay routes
ciphertext and an outsider can neither read nor inject. RolloutVerifier checks what arrives.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from ..data.rollout import DEFAULT_LIMITS, Batch, Limits, RolloutError, decode_batch
from ..data.safejson import dumps_canonical
from .identity import Identity, node_id_for_key, verify
from .protocol import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
    Rollouts,
    Stats,
    check_fields,
    dump_message,
    load,
    parse_message,
)
from .roomkey import RoomKeys

SEAL_OVERHEAD = 12 + 16  # nonce + tag
MAX_SEALED_BYTES = MAX_MESSAGE_BYTES + SEAL_OVERHEAD
_BODY = {
    "v": ("int", 0),
    "id": ("hex", 32),
    "sender": ("hex", 32),
    "room": ("hex", 32),
    "round": ("int", 0),
    "sent_at": ("float", 0),
    "batch": ("str", MAX_MESSAGE_BYTES),
}


# What a genuine message can fail when it is shown out of its context: made for another room (a
# class of last week: identities persist), too old, a second time, by another version, or in a
# burst. Anyone who once received it can cause that, so the route that brought it is charged.
CONTEXT_REASONS = frozenset(
    {
        "wrong_room",
        "expired",
        "replay",
        "stale_round",
        "rate_limited",
        "unknown_version",
        "old_version",
    }
)


class BatchRejected(ProtocolError):
    """A refused batch; `signer` is the node id to blame when only the signer can have caused it
    (it signed this content, wrong in any context), else None: the route that delivered it is
    charged instead (a relay can replay, delay or corrupt, but never sign; anyone can resend
    what it once received in another room, time or version: CONTEXT_REASONS)."""

    def __init__(self, reason: str, message: str, signer: str | None = None) -> None:
        super().__init__(reason, message)
        self.signer = None if reason.removeprefix("progress_") in CONTEXT_REASONS else signer


def _aad(keys: RoomKeys) -> bytes:
    return b"sapo-edge/2 batch\0" + keys.lan_id.encode("ascii")


def seal(keys: RoomKeys, envelope: bytes) -> bytes:
    nonce = os.urandom(12)
    return nonce + ChaCha20Poly1305(keys.batch_key).encrypt(nonce, envelope, _aad(keys))


def unseal(keys: RoomKeys, sealed: bytes) -> bytes:
    """The signed envelope inside a sealed box; ProtocolError('wrong_secret') when it does not
    open (made without this room's key, or altered on the way)."""
    if len(sealed) > MAX_SEALED_BYTES:
        raise ProtocolError("too_large", "a sealed batch is over the 1 MiB limit.")
    if len(sealed) < SEAL_OVERHEAD:
        raise ProtocolError("bad_frame", "a sealed batch is too short to hold anything.")
    try:
        return ChaCha20Poly1305(keys.batch_key).decrypt(sealed[:12], sealed[12:], _aad(keys))
    except InvalidTag:
        raise ProtocolError("wrong_secret", "a batch does not open with this room's key.") from None


def unseal_any(keys: Sequence[RoomKeys], sealed: bytes) -> bytes:
    """unseal() with the first of `keys` the box opens with (the room's keys now, then keys a
    host replaced that are still accepted: keyring.py)."""
    for k in keys[:-1]:
        try:
            return unseal(k, sealed)
        except ProtocolError as e:
            if e.reason != "wrong_secret":  # too large or too short whatever the key
                raise
    return unseal(keys[-1], sealed)


def make_rollouts(
    ident: Identity,
    keys: RoomKeys,
    batch: bytes,
    round_: int,
    *,
    batch_id: str | None = None,
    sent_at: float | None = None,
) -> tuple[bytes, str]:
    """Sign an encoded rollout batch for the room; returns (envelope bytes, batch id)."""
    batch_id = batch_id or os.urandom(16).hex()
    body = dumps_canonical(
        {
            "v": PROTOCOL_VERSION,
            "id": batch_id,
            "sender": ident.node_id,
            "room": keys.lan_id,
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
        }
    )
    return msg, batch_id


def check_signature(msg: Rollouts | Stats) -> bytes:
    """The exact body bytes, once the sender's identity and signature over them check out."""
    if node_id_for_key(msg.public_key) != msg.sender:
        raise ProtocolError("bad_identity", "rollouts.sender is not the hash of its public key.")
    raw = msg.body.encode("utf-8", "surrogatepass")
    if not verify(msg.public_key, msg.signature, raw):
        raise ProtocolError("bad_signature", "the rollout batch's signature does not verify.")
    return raw


def check_signed(msg: Rollouts) -> dict[str, Any]:
    """Identity + signature on the exact body bytes first, then the body's schema."""
    return parse_body(msg, check_signature(msg))


def parse_body(msg: Rollouts, raw: bytes) -> dict[str, Any]:
    body = check_fields(load(raw, MAX_MESSAGE_BYTES), _BODY, "rollouts body")
    if body["v"] != PROTOCOL_VERSION:
        raise ProtocolError(
            "unknown_version",
            f"rollouts body has version {body['v']}; expected {PROTOCOL_VERSION}.",
        )
    if body["sender"] != msg.sender:
        raise ProtocolError("bad_identity", "the signed body names another sender.")
    return body


@dataclass(frozen=True)
class VerifiedBatch:
    batch_id: str
    sender: str
    round: int
    payload: Batch  # the encoded rollout batch and its groups, for the inbox
    groups: int


class RolloutVerifier:
    """Opens and checks sealed batches for one room: seal, signature, replay, room, age,
    staleness, rate, producers. Thread-confined (the network loop).

    `seen` is keyed by (sender, batch id) and remembers the route a batch first came by, so the
    same batch by a second route (relay and LAN) is a duplicate, and nobody can burn another
    sender's batch id by sending first.
    """

    def __init__(
        self,
        keys: RoomKeys,
        *,
        window_s: float = 300.0,
        stale_rounds: int = 10,
        limits: Limits = DEFAULT_LIMITS,
        max_seen: int = 100_000,
    ) -> None:
        self.keys, self.window_s = keys, window_s
        self.stale_rounds, self.limits, self.max_seen = stale_rounds, limits, max_seen
        self.seen: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.last_round: OrderedDict[str, int] = OrderedDict()  # sender -> highest round

    def open(self, sealed: bytes) -> Rollouts | Stats:
        """Unseal and parse the envelope (the signature is checked by verify(), or for a
        stats message by stats_intake.StatsVerifier)."""
        return self.parse(unseal(self.keys, sealed))

    def parse(self, envelope: bytes) -> Rollouts | Stats:
        """The message of an envelope that unsealed (ProtocolError when it is neither kind)."""
        msg = parse_message(envelope)
        if not isinstance(msg, Rollouts | Stats):
            raise ProtocolError("unexpected_message", "a sealed box must hold rollouts or stats.")
        return msg

    def remember(self, sender: str, batch_id: str, route: str) -> None:
        self.seen[(sender, batch_id)] = route
        while len(self.seen) > self.max_seen:
            self.seen.popitem(last=False)

    def verify(
        self,
        msg: Rollouts,
        route: str,
        now: float | None = None,
        admit: Callable[[str, float], bool] | None = None,
    ) -> VerifiedBatch | None:
        """A VerifiedBatch, None for a duplicate by another route, or BatchRejected.

        admit(sender, signed sent_at) is asked once a batch is known to be new and validly
        signed, before the costly decoding: False refuses it as rate_limited (charged to the
        route: on a direct link that is the sender; through a relay, a resent batch could
        count twice once `seen` has forgotten it)."""
        try:
            raw = check_signature(msg)
        except ProtocolError as e:
            raise BatchRejected(e.reason, str(e)) from None
        try:  # signed content: what is wrong with it is the signer's doing (but CONTEXT_REASONS)
            body = parse_body(msg, raw)
        except ProtocolError as e:
            raise BatchRejected(e.reason, str(e), msg.sender) from None
        first = self.seen.get((msg.sender, body["id"]))
        if first is not None:
            if first == route:
                raise BatchRejected("replay", "this batch was already received by this route.")
            return None
        if body["room"] != self.keys.lan_id:  # a genuine batch of another class, resent
            raise BatchRejected("wrong_room", "the batch was made for another room.")
        now = time.time() if now is None else now
        skew = float(body["sent_at"]) - now
        if abs(skew) > self.window_s:
            raise BatchRejected(
                "expired",
                f"{msg.sender[:8]}'s batch is stamped {abs(skew):.0f} s "
                f"{'ahead of' if skew > 0 else 'behind'} this laptop's clock (over the "
                f"{self.window_s:.0f} s allowed): set the date and time automatically on both.",
            )
        last = self.last_round.get(msg.sender)
        if last is not None and body["round"] < last - self.stale_rounds:
            raise BatchRejected(
                "stale_round", f"round {body['round']} is far behind the sender's round {last}."
            )
        if admit is not None and not admit(msg.sender, float(body["sent_at"])):
            raise BatchRejected("rate_limited", "the sender is over its batches per minute.")
        payload = body["batch"].encode("utf-8")
        try:
            groups = decode_batch(payload, self.limits)
        except RolloutError as e:
            raise BatchRejected(e.reason, str(e), msg.sender) from None
        if any(g.producer != msg.sender for g in groups):
            raise BatchRejected(
                "wrong_producer",
                "every group in a signed batch must name its signer as producer.",
                msg.sender,
            )
        self.remember(msg.sender, body["id"], route)
        self.last_round[msg.sender] = max(body["round"], last or 0)
        self.last_round.move_to_end(msg.sender)
        while len(self.last_round) > 10_000:
            self.last_round.popitem(last=False)
        batch = Batch(payload, groups)  # decoded here, once: the trainer reads its groups
        return VerifiedBatch(body["id"], msg.sender, body["round"], batch, len(groups))
