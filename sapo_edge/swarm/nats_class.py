"""The class's two subjects on a room's NATS route (a part of nats_transport.NatsRoute):
members' stats on one subject outside the room's sharded tree, heard by the host alone, and the
host's goodbye on the room's end subject, heard by students. Each has a bounded queue; what
arrives passes the route's junk gate (nats_gate.py: a member's tagged message is always tried,
junk only within the route's junk cap) and the seal before the intake checks it as stats only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .intake import Intake
from .nats_gate import JunkGate
from .nats_room import class_subject, end_subject

MAX_END_BYTES = 8 << 10  # the host's sealed goodbye (a progress message) is well under this


class ClassSubjects:
    """The stats and end subjects of a NatsRoute; see the module docstring. `nc()` and `up()`:
    the route's connection now (it changes on a reconnect) and whether it is up; `open_`: the
    route's gate and seal check of one message (None: not to be opened)."""

    def __init__(
        self,
        relay_id: str,
        intake: Intake,
        gate: JunkGate,
        *,
        key: str,
        nc: Callable[[], Any],
        up: Callable[[], bool],
        open_: Callable[..., bytes | None],
    ) -> None:
        self.intake, self.gate, self.key = intake, gate, key
        self.nc_now, self.up_now, self._open = nc, up, open_
        self.lock, self.counters = intake.book.changed, intake.counters
        # members' stats for a class view (stats.py): one unsharded subject outside the room's
        # tree, heard only by a node that wants them (the host), never counted in the budget
        self.stats_subject = class_subject(relay_id)  # no room subscription ("sapo.ID.>") matches
        self.want_stats = False
        self.stats_listening = False  # the server has the stats subscription
        # the host's goodbye, heard by a student (hear_host sets want_end); a few small messages
        self.end_subject = end_subject(relay_id)
        self.want_end = False
        self.end_listening = False

    async def subscribe(self) -> None:
        """The subjects this node wants, once connected (the client re-subscribes them after a
        reconnect by itself)."""
        await self._subscribe_stats()
        await self._subscribe_end()

    async def _subscribe_stats(self) -> None:
        """The class's stats subject, for a node that wants them (the client re-subscribes it
        after a reconnect by itself)."""
        nc = self.nc_now()
        if not self.want_stats or nc is None or nc.is_closed:
            return
        if await self._listen(self.stats_subject, self._on_stats_msg, 1024, 16 << 20):
            with self.lock:
                self.stats_listening = True
                self.lock.notify_all()

    async def _listen(self, subject: str, cb, msgs: int, bytes_: int) -> bool:
        """Subscribe `cb` to one subject with a bounded queue; True once the server has it
        (False while reconnecting: the client re-subscribes when back)."""
        nc = self.nc_now()
        await nc.subscribe(subject, cb=cb, pending_msgs_limit=msgs, pending_bytes_limit=bytes_)
        try:
            await nc.flush(timeout=5)
        except Exception:  # noqa: BLE001 - reconnecting: the client re-subscribes when back
            return False
        return True

    async def _subscribe_end(self) -> None:
        """The host's goodbye subject, for a student (re-subscribed by the client after a
        reconnect by itself). Its queue is small: the host sends one message."""
        nc = self.nc_now()
        if not self.want_end or nc is None or nc.is_closed:
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
        nc = self.nc_now()
        if not self.up_now() or nc is None or nc.is_closed or len(sealed) > MAX_END_BYTES:
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
