"""Room credentials: a generated 128-bit room key written as a copyable code, a typed passphrase
stretched with scrypt, or no secret (an open room). Every key the swarm uses derives from it with
HKDF, so nothing sent on the wire or advertised on the LAN reveals the room's name or secret.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_BYTES = 16  # 128 random bits: out of reach of any offline search
REPLACED_BYTES = 32  # a host's replacing secret (RoomKeys.replaced), never typed
CODE_PREFIX = "sapo1"
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32: no i, l, o, u
_ALIASES = str.maketrans({"i": "1", "l": "1", "o": "0", "u": "v"})
# scrypt over typed text (RFC 7914): 2^15 x 8 x 128 bytes = 32 MiB and 0.1-0.2 s per guess.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
WEAK_PASSPHRASE_CHARS = 16  # shorter passphrases get a warning (see docs/security.md)


class RoomKeyError(ValueError):
    """A room key code with a typo; the message says how to get a good one."""


@dataclass(frozen=True)
class RoomKeys:
    """Everything a node derives from its room credential (never sent, never saved)."""

    label: str  # the room's name for people; only shown locally
    kind: str  # "key" (generated), "passphrase" (scrypt) or "open" (no secret)
    lan_id: str  # 32 hex: what mDNS adverts and hellos carry
    relay_id: str  # 32 hex: the relay route (not shown on the LAN)
    link_psk: bytes  # mixed into every node-to-node handshake
    batch_key: bytes  # ChaCha20-Poly1305 key of the end-to-end sealed batches

    @property
    def is_open(self) -> bool:
        return self.kind == "open"

    def replaced(self, secret: bytes) -> RoomKeys:
        """These keys with the secret parts (link psk, batch key) derived from `secret` instead:
        the ids (the mDNS adverts' lan id, the relay route and the NATS subjects from it) stay,
        so a class's host can replace what a removed member holds (swarm/keyring.py)."""
        if len(secret) != REPLACED_BYTES:
            raise ValueError(f"a replacing secret is {REPLACED_BYTES} bytes")
        return dataclasses.replace(
            self,
            link_psk=_hkdf(secret, "replaced link psk"),
            batch_key=_hkdf(secret, "replaced batch key"),
        )


def new_room_key() -> str:
    """A fresh room key as a code such as 'sapo1-4k2mq-...' (128 random bits and a checksum)."""
    return key_to_code(os.urandom(KEY_BYTES))


def key_to_code(key: bytes) -> str:
    raw = key + hashlib.sha256(b"sapo-edge room key\0" + key).digest()[:2]
    n = int.from_bytes(raw, "big") << 6  # 144 bits -> 30 base32 characters
    chars = "".join(_ALPHABET[(n >> (5 * i)) & 31] for i in reversed(range(30)))
    return CODE_PREFIX + "-" + "-".join(chars[i : i + 5] for i in range(0, 30, 5))


def looks_like_code(text: str) -> bool:
    return text.strip().lower().startswith(CODE_PREFIX + "-")


def code_to_key(code: str) -> bytes:
    """The 16 key bytes of a code; RoomKeyError for a typo (the checksum catches most)."""
    body = code.strip().lower().removeprefix(CODE_PREFIX)
    chars = "".join(c for c in body.translate(_ALIASES) if c not in "- \t")
    if len(chars) != 30 or any(c not in _ALPHABET for c in chars):
        raise RoomKeyError(
            "this room key is not 30 characters after 'sapo1-': copy it again from "
            "`sapo-edge room new` (or the node that made it)."
        )
    n = 0
    for c in chars:
        n = n * 32 + _ALPHABET.index(c)
    raw = (n >> 6).to_bytes(KEY_BYTES + 2, "big")
    key, check = raw[:KEY_BYTES], raw[KEY_BYTES:]
    if hashlib.sha256(b"sapo-edge room key\0" + key).digest()[:2] != check or n & 63:
        raise RoomKeyError("this room key has a typo (its checksum fails): copy it again.")
    return key


@functools.lru_cache(maxsize=8)
def passphrase_key(room: str, passphrase: str) -> bytes:
    """scrypt(passphrase, salt = room name): each guess at a passphrase costs an attacker this."""
    return hashlib.scrypt(
        passphrase.encode("utf-8"),
        salt=b"sapo-edge/2 room passphrase\0" + room.encode("utf-8"),
        n=SCRYPT_N,
        r=SCRYPT_R,
        p=SCRYPT_P,
        maxmem=64 << 20,
        dklen=32,
    )


def _hkdf(master: bytes, purpose: str, length: int = 32) -> bytes:
    info = b"sapo-edge/2 " + purpose.encode("ascii")
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(master)


def room_keys(room: str, secret: str = "") -> RoomKeys:
    """Derive a room's ids and keys from its credential.

    secret: a room key code (`sapo1-...`): the key is the room, the name is only a label; any
    other text: a passphrase, stretched with scrypt salted by the room name; empty: an open room
    whose keys anyone who knows the name can derive (no privacy, and the docs say so).
    """
    if not secret:
        kind, master = "open", hashlib.sha256(b"sapo-edge/2 open room\0" + room.encode()).digest()
    elif looks_like_code(secret):
        kind, master = "key", code_to_key(secret)
    else:
        kind, master = "passphrase", passphrase_key(room, secret)
    return RoomKeys(
        label=room,
        kind=kind,
        lan_id=_hkdf(master, "lan id", 16).hex(),
        relay_id=_hkdf(master, "relay route", 16).hex(),
        link_psk=_hkdf(master, "link psk"),
        batch_key=_hkdf(master, "batch key"),
    )


def describe_room(keys: RoomKeys) -> str:
    """One line for the log: how private this room is."""
    if keys.kind == "key":
        return f"room {keys.label!r}: private (room key)"
    if keys.kind == "passphrase":
        return f"room {keys.label!r}: private (passphrase, scrypt-stretched)"
    return (
        f"room {keys.label!r} is open: anyone who knows its name can join and read its rollouts; "
        "`sapo-edge room new` makes a private room key"
    )


SECRET_ENV = "SAPO_EDGE_SECRET"


def read_secret(secret: str = "", secret_file: str = "", *, prompt=None) -> str:
    """The room credential from, in order: --secret-file (a file, or '-' to ask at the prompt),
    --secret / the config file, the SAPO_EDGE_SECRET environment variable. A RoomKeyError says
    what to fix when the file cannot be read."""
    if secret_file == "-":
        if prompt is None:
            import getpass

            prompt = getpass.getpass
        return prompt("room key or passphrase (input hidden): ").strip()
    if secret_file:
        try:
            with open(secret_file, encoding="utf-8") as f:
                return f.read(4096).strip()
        except (OSError, UnicodeDecodeError) as e:
            raise RoomKeyError(
                f"cannot read the secret file {secret_file}: {getattr(e, 'strerror', None) or e}; "
                "check --secret-file."
            ) from None
    return secret or os.environ.get(SECRET_ENV, "")


def secret_warnings(argv: list[str], secret: str) -> list[str]:
    """Warnings for how a secret was given (shown before the run starts)."""
    out = []
    if any(a == "--secret" or a.startswith("--secret=") for a in argv):
        out.append(
            "the room secret on the command line is visible to other users of this machine "
            f"(ps, shell history): prefer {SECRET_ENV}=... or --secret-file FILE (or - to be asked)."
        )
    if secret and not looks_like_code(secret) and len(secret) < WEAK_PASSPHRASE_CHARS:
        out.append(
            f"a passphrase of {len(secret)} characters can be guessed offline by anyone who sees "
            "this room's traffic (each guess costs one scrypt); `sapo-edge room new` makes a "
            "room key that cannot."
        )
    return out
