"""The room's secret keys as they change: a class's host replaces the link psk and batch key
when the teacher removes a member (the removed laptop held the old ones), and sends the new
secret over each authenticated link to the members it admitted (never through a relay); a
member heeds it from the host's identity alone (link_life.py, network.py).

Keys it replaced stay accepted for a grace period (GRACE_S): a link's handshake with the old
link psk and a batch sealed under the old batch key, from a classmate that has not heard the
new secret yet. On the host a member it admitted may also link with an old psk after that (a
laptop asleep at the time), and is given the new secret on that link; nobody else is.
Everything sealed and every handshake this laptop starts uses the newest keys.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .roomkey import RoomKeys

GRACE_S = 60.0  # how long replaced keys are still accepted from anyone in the room
KEEP_REPLACED = 16  # replaced link psks kept for the host's admitted members


class KeyRing:
    """This laptop's room keys now (`current`) and the ones they replaced. Thread-safe.

    `may_hold_old(node_id)`: whether a peer may still link with a replaced link psk after the
    grace period (the host: a member it admitted and did not remove); nobody by default."""

    def __init__(
        self,
        keys: RoomKeys,
        *,
        grace_s: float = GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._current = keys
        self.secret = b""  # the secret the current keys derive from ("" : the room credential)
        self.replaced_at = 0.0  # when the current keys replaced others (this laptop's clock)
        self.grace_s, self.clock = grace_s, clock
        self._replaced: list[tuple[RoomKeys, float]] = []  # (old keys, when replaced), oldest first
        self._past: set[bytes] = set()  # secrets replaced since: never taken again
        self.may_hold_old: Callable[[str], bool] = lambda _node_id: False
        self._lock = threading.Lock()

    @property
    def current(self) -> RoomKeys:
        return self._current

    def replace(self, secret: bytes, *, grace: bool = True, age: float = 0.0) -> bool:
        """The keys derived from `secret` from now on (the room's ids unchanged); the old ones
        accepted for what is left of the grace period `age` seconds after the host replaced
        them (`grace=False`: not at all, a newcomer's welcome named the secret before it used
        any). False when it is the secret in force, or one replaced since (a stale word)."""
        with self._lock:
            if secret == self.secret or secret in self._past:
                return False
            old, now = self._current, self.clock()
            if self.secret:
                self._past.add(self.secret)
            self._current, self.secret, self.replaced_at = old.replaced(secret), secret, now - age
            if grace and age < self.grace_s:
                self._replaced = [*self._replaced, (old, now - age)][-KEEP_REPLACED:]
            return True

    def age(self) -> float:
        """Seconds since the current keys replaced others (what a rekey tells a member)."""
        return max(0.0, self.clock() - self.replaced_at)

    def accepted(self) -> tuple[RoomKeys, ...]:
        """The keys a sealed batch may be opened with: the current ones first, then the ones
        replaced within the grace period, newest first."""
        with self._lock:
            now, current, replaced = self.clock(), self._current, self._replaced
        recent = [keys for keys, at in reversed(replaced) if now - at < self.grace_s]
        return (current, *recent)

    def older_psks(self, node_id: str) -> tuple[bytes, ...]:
        """The replaced link psks a handshake from `node_id` may use besides the current one:
        those within the grace period, or all of them for a peer that `may_hold_old`."""
        if self._replaced and self.may_hold_old(node_id):
            with self._lock:
                return tuple(keys.link_psk for keys, _at in reversed(self._replaced))
        return tuple(keys.link_psk for keys in self.accepted()[1:])
