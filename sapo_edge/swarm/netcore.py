"""What every part of a node's network shares (network.py puts the parts together): who it is
(identity, room keys as they change: keyring.py, and the name, model and backend it tells peers
in the handshake), one lock
and its condition (notified on any change, so `wait_for` re-checks), the counters, the peer book
(charging and muting), the log, and the debug trace (`SAPO_EDGE_NET_DEBUG=1`).

The parts (listener.py, link_life.py, dialing.py, stats_channel.py) each take this object and
the other parts they use in their constructor: what a part needs is in its signature.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..data.textsafe import clean
from .handshake import HandshakeError, LocalInfo
from .identity import Identity
from .keyring import KeyRing
from .peerbook import PeerBook
from .roomkey import RoomKeys

# `SAPO_EDGE_NET_DEBUG=1`: every dial, advert, handshake and link decision, in order, on stderr
trace_log = logging.getLogger("sapo_edge.swarm.links")
if os.environ.get("SAPO_EDGE_NET_DEBUG") and not trace_log.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("%(asctime)s net-debug %(message)s"))
    trace_log.addHandler(_h)
    trace_log.setLevel(logging.DEBUG)


class NetCore:
    """See the module docstring. `log` may be replaced at any time (a student's dashboard
    quiets its network after the summary): parts call `core.log`, never a copy of it."""

    def __init__(
        self,
        identity: Identity,
        keys: RoomKeys,
        *,
        name: str,
        model: str,
        backend: str,
        log: Callable[[str], None],
        reject_threshold: int,
        reject_window: float,
        mute_base: float,
        max_tracked: int,
    ) -> None:
        self.ident, self.name = identity, name
        self.ring = KeyRing(keys)
        self.model, self.backend = model, backend
        self.log = log
        # a peer's goodbye (its node id, the reason) as it is read: a class's student hears its
        # host refuse it ("removed": the host's word inside their authenticated link)
        self.on_bye: Callable[[str, str], None] = lambda _key, _reason: None
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on any state change
        self.counters: Counter = Counter()  # totals: published, delivered, duplicate, rejected:*
        self.book = PeerBook(
            self.changed,
            self.counters,
            reject_threshold=reject_threshold,
            reject_window=reject_window,
            mute_base=mute_base,
            max_tracked=max_tracked,
            log=lambda text: self.log(text),
            own_name=name,
        )

    @property
    def keys(self) -> RoomKeys:
        """The room's keys in force (a host replaces their secret parts on a removal)."""
        return self.ring.current

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until predicate() holds (re-checked on every network event) or timeout."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counters[key] += n

    def reject(self, key: str, reason: str) -> bool:
        """Charge `key` (a node id, 'relay:URL', 'ip:ADDR'); True when it is now muted."""
        return self.book.reject(key, reason)

    def info(self) -> LocalInfo:
        """What the handshake tells a peer about this node."""
        return LocalInfo(self.name, self.model, self.backend)

    def note_handshake_failure(self, key: str, e: HandshakeError) -> None:
        if e.reason == "same_identity":
            self.log(f"peer {key}: {clean(str(e), 300)}")
        self.reject(key, e.reason)

    def trace(self, event: str, **fields: Any) -> None:
        """One line per link event at debug level (SAPO_EDGE_NET_DEBUG=1 prints them)."""
        if trace_log.isEnabledFor(logging.DEBUG):
            me = self.ident.node_id[:8]
            text = " ".join(
                f"{k}={v[:8] if isinstance(v, str) and len(v) == 32 else v}"
                for k, v in fields.items()
            )
            trace_log.debug("%s %s %s", me, event, clean(text, 400))
