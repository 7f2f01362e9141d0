"""Which bytes that arrive on a room's NATS subjects are worth an unseal attempt. Anyone with
publish rights on the server can send there, and only the seal tells a member's message from
junk, at the cost of reading it all. A member tags what it publishes (a NATS header: an HMAC
under a key derived from the room key over the subject, the box's nonce and length, and the
time): a fresh tagged message is always tried, whatever junk came before it; what is untagged
(junk, or a node of an older version) is tried only while the route's junk cap holds, so bytes
that fail the seal never spend an honest message's chance (issue 44: 48 MiB/s of junk used to
spend the cap and shed honest batches for the rest of each second).
"""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from collections.abc import Callable
from hashlib import sha256

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .roomkey import RoomKeys

TAG_HEADER = "Sapo-Tag"  # "<unix seconds>.<32 hex>"
TAG_OVERHEAD = 64  # what the header adds to a message against the server's max_payload
_NONCE = 12  # the sealed box's nonce (batches.seal): fresh per message

TRY, TRY_CAPPED, SHED, SEEN = "try", "try_capped", "shed", "seen"


class JunkGate:
    """The tag of what this node publishes, and the verdict on what arrives: TRY (a fresh
    member's tag: try it), TRY_CAPPED (untagged, within the junk cap), SHED (untagged, the cap
    is spent this second) or SEEN (a tag already opened: a copy, dropped unopened). After the
    attempt, say how it went (`opened`, `failed`): bytes that fail count against the cap, and a
    tag whose box failed is not trusted again (a copied tag on other bytes is tried once).
    Loop-confined (the network loop)."""

    def __init__(
        self,
        keys: RoomKeys | Callable[[], RoomKeys],
        junk_bytes_per_s: int,
        *,
        window_s: float = 300.0,
        max_nonces: int = 65536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # the room's keys in force (a callable: a host may replace them, keyring.py; a tag made
        # under the replaced key is then untagged, within the junk cap, until its sender hears)
        self.keys = keys if callable(keys) else lambda: keys
        self._derived = (b"", b"")  # (batch key, tag key derived from it)
        self.junk_bytes_per_s, self.window_s, self.max_nonces = (
            junk_bytes_per_s,
            window_s,
            max_nonces,
        )
        self.clock = clock
        self.junk_bytes, self.junk_window = 0, -1e9
        self.nonces: OrderedDict[bytes, bool] = OrderedDict()  # nonce -> opened (else failed)

    @property
    def key(self) -> bytes:
        batch_key = self.keys().batch_key
        if self._derived[0] != batch_key:
            tag_key = HKDF(
                algorithm=hashes.SHA256(), length=32, salt=None, info=b"sapo-edge/2 nats tag"
            ).derive(batch_key)
            self._derived = (batch_key, tag_key)
        return self._derived[1]

    def _mac(self, subject: str, sealed: bytes, at: int) -> str:
        data = b"%s\0%d\0%d\0" % (subject.encode(), len(sealed), at) + sealed[:_NONCE]
        return hmac.new(self.key, data, sha256).hexdigest()[:32]

    def headers(self, subject: str, sealed: bytes) -> dict[str, str]:
        """The header to publish `sealed` on `subject` with."""
        at = int(time.time())
        return {TAG_HEADER: f"{at}.{self._mac(subject, sealed, at)}"}

    def verdict(self, subject: str, data: bytes, headers: dict[str, str] | None) -> str:
        if self._tagged(subject, data, headers):
            state = self.nonces.get(data[:_NONCE])
            if state is None:
                return TRY
            if state:
                return SEEN
        now = self.clock()
        if now - self.junk_window >= 1.0:
            self.junk_window, self.junk_bytes = now, 0
        return SHED if self.junk_bytes >= self.junk_bytes_per_s else TRY_CAPPED

    def _tagged(self, subject: str, data: bytes, headers: dict[str, str] | None) -> bool:
        value = headers.get(TAG_HEADER, "") if headers else ""
        at, _, mac = value.partition(".")
        if len(value) > 64 or len(mac) != 32 or not at.isdigit() or len(data) < _NONCE:
            return False
        if abs(time.time() - int(at)) > self.window_s:  # an old tag: its nonce is forgotten
            return False
        return hmac.compare_digest(mac, self._mac(subject, data, int(at)))

    def opened(self, data: bytes) -> None:
        self._note(data[:_NONCE], True)

    def failed(self, data: bytes, verdict: str) -> None:
        """`data` did not open (or was refused unopened, e.g. too large): its bytes are junk."""
        self.junk_bytes += len(data)
        if verdict == TRY:
            self._note(data[:_NONCE], False)

    def _note(self, nonce: bytes, opened: bool) -> None:
        self.nonces[nonce] = opened
        self.nonces.move_to_end(nonce)
        while len(self.nonces) > self.max_nonces:
            self.nonces.popitem(last=False)
