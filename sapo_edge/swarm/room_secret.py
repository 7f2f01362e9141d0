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
from .link_life import send_bye
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

    def replace(self, holders: Callable[[str], bool], told: Callable[[str], bool]) -> str:
        """The host: a new secret from now on (returned as hex, for later welcomes), given to
        the members `holders` names (a member it admitted and did not remove) at once and every
        SHARE_EVERY_S; they may link with a replaced key, and so may the members `told` names
        (the removed: the link then says so), nobody else after the grace period. Any thread:
        what was sealed before this call (the word that removes a member) was sealed under the
        keys that member holds."""
        secret = os.urandom(REPLACED_BYTES)
        first = self.holders is None
        ring = self.net.core.ring
        ring.may_hold_old = lambda key: holders(key) or told(key)  # told: refused as removed
        self.holders = holders
        ring.replace(secret)
        self.net.core.count("room_key_replaced")
        self._on_loop(self._share, first)
        self._on_loop(self._sweep_later)
        return secret.hex()

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self.net._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(fn, *args)

    def _share(self, again: bool) -> None:
        """On the network's loop: the secret in force first on every link to a holder (ahead
        of frames sealed under it; a member that lost it to a full queue hears it again)."""
        for key, link in list(self.net.table.links.items()):
            if (words := self.first_words(key)) is not None:
                link.outbox.put_first(KIND_MESSAGE, words)
        if again and not self.net.closed:
            asyncio.get_running_loop().call_later(SHARE_EVERY_S, self._share, True)

    def _sweep_later(self) -> None:
        """On the loop: close the links opened under a replaced link key once its grace ends
        (a fresh identity that linked with it then: nothing it sends opens any more, and it
        held a link slot); a member re-dials under the new key at once."""
        ring = self.net.core.ring
        wait = max(0.0, ring.grace_s - ring.age()) + 0.5
        asyncio.get_running_loop().call_later(wait, self._sweep)

    def _sweep(self) -> None:
        ring, table = self.net.core.ring, self.net.table
        psks = {keys.link_psk for keys in ring.accepted()}  # within a grace still: kept
        for key, link in list(table.links.items()):
            if not is_relay(key) and link.session.psk not in psks and not link.ws.closed:
                if self.holders is not None and self.holders(key):
                    continue  # the host's link to a member it admitted: given the key on it
                self.net.core.count("links_closed_replaced_key")
                table.spawn(send_bye(link.session, link.ws, "replaced", "the room's key changed."))

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
        return make_rekey(ring.secret, ring.age())

    def heard(self, key: str, msg: Rekey) -> bool:
        """A new secret on the link with `key`; False when that peer is not this node's host
        (the link then charges it, as any unexpected message)."""
        if not self.heed_from or key != self.heed_from:
            return False
        if self.net.core.ring.replace(msg.secret, age=msg.age):
            self.net.core.count("room_key_replaced")
            self.net.core.log("the class's host replaced the room's key (a member was removed)")
            self._on_loop(self._sweep_later)
        return True
