"""The class's two subjects on a room's NATS route (nats_transport.NatsRoute mixes this in):
members' stats on one subject outside the room's sharded tree, heard by the host alone, and the
host's goodbye on the room's end subject, heard by students. Each has a bounded queue; what
arrives passes the route's junk gate (nats_gate.py: a member's tagged message is always tried,
junk only within the route's junk cap) and the seal before the intake checks it as stats only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from .nats_gate import JunkGate

MAX_END_BYTES = 8 << 10  # the host's sealed goodbye (a progress message) is well under this


class ClassSubjects:
    """The stats and end subjects of NatsRoute; see the module docstring."""

    # provided by NatsRoute (nats_transport.py)
    nc: Any
    up: bool
    lock: Any
    counters: Counter
    intake: Any
    key: str
    gate: JunkGate
    want_stats: bool
    stats_listening: bool
    stats_subject: str
    want_end: bool
    end_listening: bool
    end_subject: str
    _open: Callable[..., bytes | None]

    async def _subscribe_stats(self) -> None:
        """The class's stats subject, for a node that wants them (the client re-subscribes it
        after a reconnect by itself)."""
        if not self.want_stats or self.nc is None or self.nc.is_closed:
            return
        if await self._listen(self.stats_subject, self._on_stats_msg, 1024, 16 << 20):
            with self.lock:
                self.stats_listening = True
                self.lock.notify_all()

    async def _listen(self, subject: str, cb, msgs: int, bytes_: int) -> bool:
        """Subscribe `cb` to one subject with a bounded queue; True once the server has it
        (False while reconnecting: the client re-subscribes when back)."""
        await self.nc.subscribe(subject, cb=cb, pending_msgs_limit=msgs, pending_bytes_limit=bytes_)
        try:
            await self.nc.flush(timeout=5)
        except Exception:  # noqa: BLE001 - reconnecting: the client re-subscribes when back
            return False
        return True

    async def _subscribe_end(self) -> None:
        """The host's goodbye subject, for a student (re-subscribed by the client after a
        reconnect by itself). Its queue is small: the host sends one message."""
        if not self.want_end or self.nc is None or self.nc.is_closed:
            return
        if await self._listen(self.end_subject, self._on_end_msg, 64, 64 * MAX_END_BYTES):
            with self.lock:
                self.end_listening = True
                self.lock.notify_all()

    async def _on_end_msg(self, msg) -> None:
        """Anyone with publish rights may send here: through the junk gate and bounded in size
        before it is opened, then checked like any member's stats (only the host's signed
        "ended" is heeded: join.py)."""
        with self.lock:
            self.counters["nats_end_in"] += 1
            self.lock.notify_all()
        envelope = self._open(msg, MAX_END_BYTES)
        if envelope is not None:
            self.intake.accept_unsealed(self.key, "relay", envelope, stats_only=True)

    async def say_goodbye(self, sealed: bytes, timeout: float) -> bool:
        """Publish the host's goodbye on the end subject and wait (at most `timeout`) until the
        server has it; False when NATS is down or the wait ran out."""
        nc = self.nc
        if not self.up or nc is None or nc.is_closed or len(sealed) > MAX_END_BYTES:
            return False
        try:
            headers = self.gate.headers(self.end_subject, sealed)
            await nc.publish(self.end_subject, sealed, headers=headers)
            await nc.flush(timeout=max(0.1, timeout))
        except Exception:  # noqa: BLE001 - a closing or reconnecting client: not delivered
            return False
        with self.lock:
            self.counters["nats_goodbyes"] += 1
        return True

    async def _on_stats_msg(self, msg) -> None:
        """Members' stats, for the host: through the junk gate (this subject had no junk cap:
        issue 44), then checked as stats only (rollouts here are dropped unverified)."""
        with self.lock:
            self.counters["nats_stats_in"] += 1
        envelope = self._open(msg)
        if envelope is not None:
            self.intake.accept_unsealed(self.key, "relay", envelope, stats_only=True)
