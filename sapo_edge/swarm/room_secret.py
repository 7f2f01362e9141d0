"""A class's host replaces the room's secret keys when the teacher removes a member (the removed
laptop holds them: it could link and send under a fresh identity), and each member it admitted
and did not remove takes the new secret over its own authenticated link to the host: at once,
again with the host's repeated words (`share`), and first thing on every new link from one.
Never through a relay or NATS (the removed laptop holds their batch key). A member heeds a new
secret from the class's host alone (`heed_from`, the host id its welcome named). The keys
themselves, and the grace for the replaced ones, are keyring.py's. A part of network.py's
NetworkTransport.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from .handshake import KIND_MESSAGE
from .protocol import Rekey, make_rekey
from .roomkey import REPLACED_BYTES
from .routes import is_relay

SHARE_EVERY_S = 60.0  # the host gives the secret in force to its linked members again this often


class RoomSecret:
    """Who gives and who is given this node's room secret (see the module docstring)."""

    def __init__(self, net: Any) -> None:
        self.net = net
        self.holders: Callable[[str], bool] | None = None  # the host: who is given a new secret
        self.heed_from = ""  # a member: the node id whose new secret it takes (its host's)

    def replace(self, holders: Callable[[str], bool]) -> str:
        """The host: a new secret from now on (returned as hex, for later welcomes), given to
        the members `holders` names (a member it admitted and did not remove) at once and every
        SHARE_EVERY_S; they may link with a replaced key, nobody else after the grace period.
        Any thread."""
        secret = os.urandom(REPLACED_BYTES)
        loop = self.net._loop
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(self._replace(secret, holders), loop)
        else:
            self._replace_now(secret, holders)
        return secret.hex()

    async def _replace(self, secret: bytes, holders: Callable[[str], bool]) -> None:
        """On the loop, after what was scheduled before it (the host's word that removes a
        member, sealed under the keys that member holds, so that it still hears it)."""
        await asyncio.sleep(0)
        first = self._replace_now(secret, holders)
        self._share(again=first)

    def _replace_now(self, secret: bytes, holders: Callable[[str], bool]) -> bool:
        """True when this is the first replacement (the regular sharing starts)."""
        first = self.holders is None
        ring = self.net.core.ring
        ring.may_hold_old, self.holders = holders, holders
        ring.replace(secret)
        self.net.core.count("room_key_replaced")
        return first

    def _share(self, again: bool) -> None:
        """On the network's loop: the secret in force on every link to a holder (a member that
        lost the first one to a full queue hears it again)."""
        for key, link in list(self.net.table.links.items()):
            if (words := self.first_words(key)) is not None:
                link.outbox.put(KIND_MESSAGE, words)
        if again and not self.net.closed:
            asyncio.get_running_loop().call_later(SHARE_EVERY_S, self._share, True)

    def heed(self, host_id: str, secret_hex: str = "") -> None:
        """A member: take new secrets from `host_id` alone, and the one its welcome named (before
        any key was used: no grace for the credential's own)."""
        self.heed_from = host_id
        if secret_hex:
            self.net.core.ring.replace(bytes.fromhex(secret_hex), grace=False)

    def first_words(self, key: str) -> bytes | None:
        """What the host says first on a link with `key`: the secret in force, to a holder."""
        ring = self.net.core.ring
        if self.holders is None or is_relay(key) or not ring.secret or not self.holders(key):
            return None
        return make_rekey(ring.secret)

    def heard(self, key: str, msg: Rekey) -> bool:
        """A new secret on the link with `key`; False when that peer is not this node's host
        (the link then charges it, as any unexpected message)."""
        if not self.heed_from or key != self.heed_from:
            return False
        if self.net.core.ring.replace(msg.secret):
            self.net.core.count("room_key_replaced")
            self.net.core.log("the class's host replaced the room's key (a member was removed)")
        return True
