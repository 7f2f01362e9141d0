"""The link handshake, in the spirit of Noise: each side sends a hello with a fresh X25519 key;
both hash the two hellos into one transcript; session keys come from HKDF over the DH secret and
the room's link key, salted by the transcript; each side signs (Ed25519) the transcript and its
role, inside the first encrypted frame. After it every frame is ChaCha20-Poly1305 with a
per-direction counter.

A listener may accept more than one link key (`older`: keys a class's host replaced, still
accepted for a while; keyring.py): it tries each on the dialer's first encrypted frame, which
only a holder of that key can have made.

Ordering: the dialer (initiator) proves first; the listener answers with its own proof only
after checking the dialer's, so whoever merely connects to a node learns nothing that depends
on the room key. Nothing is reflected or relayed: a signature covers both ephemeral keys and the
signer's role, and the keys depend on a DH secret only the two ends hold.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .identity import Identity, verify
from .peer import WS, Closed, read_raw
from .protocol import (
    MAX_HANDSHAKE_BYTES,
    Auth,
    Bye,
    Hello,
    ProtocolError,
    auth_data,
    make_auth,
    make_bye,
    make_hello,
    new_nonce,
    parse_message,
)

KIND_MESSAGE, KIND_SEALED = 0, 1  # the first byte of every decrypted frame
TAG_BYTES = 16


class HandshakeError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LinkBroken(Exception):
    """A frame that does not decrypt under the session key: not from the authenticated peer."""


class Channel:
    """Encrypts and decrypts the frames of one authenticated link (one counter per direction)."""

    def __init__(self, ws: WS, send_key: bytes, recv_key: bytes) -> None:
        self.ws = ws
        self._send, self._recv = ChaCha20Poly1305(send_key), ChaCha20Poly1305(recv_key)
        self._sent = self._received = 0
        self._lock = asyncio.Lock()

    async def send(self, kind: int, data: bytes) -> None:
        async with self._lock:  # a counter per frame, in the order the frames are written
            nonce = struct.pack("<4xQ", self._sent)
            self._sent += 1
            frame = self._send.encrypt(nonce, bytes([kind]) + data, None)
            await self.ws.send_bytes(frame)

    def open(self, frame: bytes) -> tuple[int, bytes]:
        """(kind, data) of the next frame; LinkBroken when it was not sealed by the peer."""
        nonce = struct.pack("<4xQ", self._received)
        try:
            plain = self._recv.decrypt(nonce, frame, None)
        except (InvalidTag, ValueError):
            raise LinkBroken("a frame failed authentication") from None
        self._received += 1
        if not plain:
            raise LinkBroken("an empty frame")
        return plain[0], plain[1:]


@dataclass(frozen=True)
class Session:
    """An authenticated link: who the peer is (hello: keys; auth: name, model...) and its channel."""

    hello: Hello
    auth: Auth
    channel: Channel
    initiator: bool
    psk: bytes = b""  # the link key it was opened with (a replaced one: closed after its grace)


@dataclass(frozen=True)
class LocalInfo:
    """What this side tells an authenticated peer about itself."""

    name: str = ""
    model: str = ""
    backend: str = ""


def transcript_hash(hello_initiator: bytes, hello_responder: bytes) -> bytes:
    h = hashlib.sha256(b"sapo-edge/2 transcript\0")
    for part in (hello_initiator, hello_responder):
        h.update(len(part).to_bytes(4, "big") + part)
    return h.digest()


def session_keys(dh: bytes, psk: bytes, transcript: bytes) -> tuple[bytes, bytes]:
    """(initiator-to-responder key, responder-to-initiator key)."""
    okm = HKDF(
        algorithm=hashes.SHA256(), length=64, salt=transcript, info=b"sapo-edge/2 session"
    ).derive(dh + psk)
    return okm[:32], okm[32:]


async def handshake(
    ws: WS,
    ident: Identity,
    room: str,
    psk: bytes,
    *,
    initiator: bool,
    timeout: float,
    role: str = "node",
    expect_role: str | None = None,
    info: LocalInfo = LocalInfo(),
    older: Callable[[str], tuple[bytes, ...]] | None = None,
) -> Session:
    """Run the handshake on an open websocket; the whole of it within `timeout` seconds.

    room: the room's lan id (node to node) or relay route; a relay answering a node passes the
    node's own (room="" means: take the initiator's). psk: the room's link key between nodes,
    b"" on links to and from a relay (which knows no room key). older: for a listener, the
    other link keys it accepts from the dialer whose node id it is given (keyring.py). Raises
    HandshakeError(reason) after telling the peer why with a bye (in the clear: nothing secret
    is in it).
    """
    try:
        async with asyncio.timeout(timeout):
            return await _handshake(ws, ident, room, psk, initiator, role, expect_role, info, older)
    except TimeoutError:
        await _fail(ws, "timeout", "the handshake took too long.", send=False)
        raise AssertionError("unreachable") from None


async def _handshake(ws, ident, room, psk, initiator, role, expect_role, info, older) -> Session:
    eph = X25519PrivateKey.generate()
    eph_pub = eph.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    if initiator:
        mine = make_hello(ident, room, new_nonce(), eph_pub, role)
        await ws.send_bytes(mine)
        theirs, hello = await _read_hello(ws)
    else:
        theirs, hello = await _read_hello(ws)
        room = room or hello.room
        mine = make_hello(ident, room, new_nonce(), eph_pub, role)
    if expect_role and hello.role != expect_role:
        await _fail(ws, "bad_role", f"expected a {expect_role}, got a {hello.role}.")
    if hello.node_id == ident.node_id:
        await _fail(
            ws,
            "same_identity",
            f"both nodes present id {ident.node_id[:12]}: one copied the other's identity.key; "
            "give one node its own SAPO_EDGE_HOME (or delete its identity.key) and restart it.",
        )
    if hello.room != room:
        await _fail(ws, "wrong_room", "the peer is in a different room.")
    if not initiator:
        await ws.send_bytes(mine)
    try:
        dh = eph.exchange(X25519PublicKey.from_public_bytes(hello.ephemeral))
    except ValueError:
        await _fail(ws, "bad_value", "the peer's ephemeral key is not usable.")
    t = transcript_hash(*((mine, theirs) if initiator else (theirs, mine)))
    psks = (psk,) if initiator or older is None or not psk else (psk, *older(hello.node_id))
    channels = []
    for key in psks:
        k_i2r, k_r2i = session_keys(dh, key, t)
        channels.append(Channel(ws, *((k_i2r, k_r2i) if initiator else (k_r2i, k_i2r))))
    my_role, their_role = ("initiator", "responder") if initiator else ("responder", "initiator")
    auth_msg = make_auth(ident, my_role, t, name=info.name, model=info.model, backend=info.backend)
    if initiator:
        await channels[0].send(KIND_MESSAGE, auth_msg)
        auth, channel = await _read_auth(ws, channels, hello, their_role, t, psk)
    else:  # the listener proves nothing before the dialer has
        auth, channel = await _read_auth(ws, channels, hello, their_role, t, psk)
        await channel.send(KIND_MESSAGE, auth_msg)
    return Session(hello, auth, channel, initiator, psks[channels.index(channel)])


async def _read(ws: WS) -> bytes:
    raw = await read_raw(ws)
    if isinstance(raw, Closed):
        raise HandshakeError(raw.reason or "closed", "the peer closed during the handshake.")
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_HANDSHAKE_BYTES:  # refused before any parsing
        await _fail(ws, "too_large", f"handshake messages are at most {MAX_HANDSHAKE_BYTES} bytes.")
    return data


async def _read_hello(ws: WS) -> tuple[bytes, Hello]:
    data = await _read(ws)
    try:
        msg = parse_message(data, MAX_HANDSHAKE_BYTES)
    except ProtocolError as e:
        await _fail(ws, e.reason, f"during handshake: {e}")
    if isinstance(msg, Bye):
        await _fail(ws, msg.reason, msg.message, send=False)
    if not isinstance(msg, Hello):
        await _fail(ws, "unexpected_message", "expected a hello.")
    return data, msg


async def _read_auth(
    ws, channels: list[Channel], hello: Hello, role: str, t: bytes, psk: bytes
) -> tuple[Auth, Channel]:
    """The peer's auth and the channel (of one per link key accepted) its frame opened with."""
    data = await _read(ws)
    opened = None
    for channel in channels:
        try:
            kind, plain = channel.open(data)
        except LinkBroken:
            continue
        opened = channel
        break
    if opened is None:
        try:  # the peer may have refused us in the clear
            told = parse_message(data, MAX_HANDSHAKE_BYTES)
        except ProtocolError:
            told = None
        if isinstance(told, Bye):
            await _fail(ws, told.reason, told.message, send=False)
        if psk:
            await _fail(ws, "wrong_secret", "the peer does not hold this room's key.")
        await _fail(ws, "bad_frame", "the peer's auth does not decrypt.")
    try:
        msg = parse_message(plain, MAX_HANDSHAKE_BYTES) if kind == KIND_MESSAGE else None
    except ProtocolError as e:
        await _fail(ws, e.reason, f"during handshake: {e}")
    if not isinstance(msg, Auth):
        await _fail(ws, "unexpected_message", "expected an auth.")
    if not verify(hello.public_key, msg.signature, auth_data(role, t)):
        await _fail(ws, "bad_signature", "the peer's signature over this session does not verify.")
    return msg, opened


async def _fail(ws: WS, reason: str, message: str, send: bool = True):
    if send and not ws.closed:
        try:
            await ws.send_bytes(make_bye(reason, message))
        except (ConnectionError, RuntimeError):
            pass
    await ws.close()
    raise HandshakeError(reason, message)
