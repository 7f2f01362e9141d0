"""A node's Ed25519 identity: made on first run, kept (mode 0600, owned by the user) in the
user's config dir.

node id = first 32 hex chars of sha256(public key); the readable name is derived from it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

_ADJECTIVES = (
    "amber brave calm clever cosmic dapper eager fancy gentle happy icy jolly keen lucky "
    "mellow nimble plucky quiet rapid rusty shiny silent snowy sunny swift tidy vivid witty "
    "zesty bold bright crisp"
).split()
_ANIMALS = (
    "otter falcon badger heron lynx panda koala gecko moose raven tiger whale bison crane "
    "dingo eagle ferret gibbon hyena ibis jackal lemur marmot newt ocelot puffin quokka "
    "robin seal toucan wombat yak"
).split()


class IdentityError(ValueError):
    """An identity file that cannot be used; the message says what to do."""


def node_id_for_key(public_key: bytes) -> str:
    """The node id a public key stands for (32 hex chars)."""
    return hashlib.sha256(b"sapo-edge-node-id:" + public_key).hexdigest()[:32]


def name_for_id(node_id: str) -> str:
    """A readable, stable name such as 'swift-otter-3f2a' (not unique: the id is)."""
    h = hashlib.sha256(node_id.encode("ascii")).digest()
    return f"{_ADJECTIVES[h[0] % len(_ADJECTIVES)]}-{_ANIMALS[h[1] % len(_ANIMALS)]}-{node_id[:4]}"


def verify(public_key: bytes, signature: bytes, data: bytes) -> bool:
    """True when `signature` is the Ed25519 signature of `data` by `public_key`."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Identity:
    private_key: Ed25519PrivateKey
    public_key: bytes  # 32 raw bytes

    @property
    def node_id(self) -> str:
        return node_id_for_key(self.public_key)

    @property
    def name(self) -> str:
        return name_for_id(self.node_id)

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)

    @classmethod
    def generate(cls) -> Identity:
        return cls._from_private(Ed25519PrivateKey.generate())

    @classmethod
    def _from_private(cls, key: Ed25519PrivateKey) -> Identity:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        return cls(key, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def private_bytes(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
        )

        return self.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def check_private(p: Path) -> None:
    """Refuse a key file another user owns (they could have planted or read it); tighten a
    mode that lets others read it. The owner check is skipped where there are no uids."""
    st = p.stat()
    getuid = getattr(os, "getuid", None)
    if getuid is not None and st.st_uid != getuid():
        raise IdentityError(
            f"identity file {p} belongs to user id {st.st_uid}, not to you ({getuid()}): "
            "another user could read or replace it. Move it away (a new identity is made on "
            "the next run) or set SAPO_EDGE_HOME to a folder of your own."
        )
    if os.name == "posix" and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(p, 0o600)  # a private key readable by others: tighten it


def default_identity_path() -> Path:
    from ..data.paths import identity_path  # the OS's config folder, or $SAPO_EDGE_HOME

    return identity_path()


def load_or_create(path: str | Path | None = None) -> tuple[Identity, bool]:
    """Read the identity at `path` (default: $SAPO_EDGE_HOME or the OS's config folder), or make
    one there with mode 0600. Returns (identity, created)."""
    p = Path(path) if path else default_identity_path()
    if p.exists():
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise IdentityError(f"cannot read identity {p}: {e.strerror or e}.") from None
        if len(raw) != 32:
            raise IdentityError(
                f"identity file {p} holds {len(raw)} bytes, not a 32-byte Ed25519 key: "
                "move it away and a new identity is made on the next run."
            )
        check_private(p)
        return Identity._from_private(Ed25519PrivateKey.from_private_bytes(raw)), False
    ident = Identity.generate()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, ident.private_bytes())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, p)
    return ident, True
