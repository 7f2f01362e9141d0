"""Who holds a row on the class's board, by what the host knows rather than who came first: the
host; members it admitted with the code (a seat each, the class's size at most, so every one of
them has a row); then members whose groups it verified lately, or ever; members that signed
anything; last, rows that never did anything. Identities are free to anyone with the room key,
admissions are not: a code holder gets a seat per admission, bounded per address and by the
class's size, and a seat not held by work lapses when another newcomer needs it: first one that
never did anything (after GRACE_S), then one that only signed messages (after ACTED_GRACE_S: a
signed progress message is cheap, and issue 54 found seven puppets keeping a class of 8 full with
one each), then one whose verified groups stopped (RECENT_WORK_S).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GRACE_S = 120.0  # an admitted newcomer holds its seat this long before it does anything
ACTED_GRACE_S = 600.0  # ...and this long once heard from, before its groups must arrive (a first
# round of a slow laptop, its model's load included)
RECENT_WORK_S = 600.0  # verified groups within this long count as recent work
WAITING_PER_ADDRESS = 16  # admitted, not yet heard from: at most this many per address (past it
# the oldest of them lapses: a school's shared address is never refused for a flood from it)
HOST, ADMITTED, RECENT_WORK, WORKED, SIGNED, NOTHING = 5, 4, 3, 2, 1, 0  # a row's standing


@dataclass
class Seat:
    at: float  # when the host admitted it
    ip: str
    acted: bool = False  # its own signed figures or progress arrived, or its groups
    acted_at: float = 0.0  # when it first did


class Seats:
    """The host's admitted members and the verified work it saw, for the board's rows; used by
    ClassBoard with its lock held. `students`: the seats (the class's size, the host's own row
    not counted)."""

    def __init__(self, students: int) -> None:
        self.students = students
        self.admitted: dict[str, Seat] = {}
        self.work: dict[str, tuple[int, float]] = {}  # node id -> (verified groups, when it grew)
        self.lapsed_waiting = 0  # seats that lapsed for a newcomer from the same address

    def admit(self, node_id: str | None, ip: str, now: float) -> str:
        """A seat for a newcomer that proved the code ("" admits it; `class_full`); None: it
        said nothing of who it is (admitted while there is room, without a seat). Past
        WAITING_PER_ADDRESS seats from its address not yet heard from, the oldest of them lapses
        (issue 54: refusing the newcomer instead let one code holder behind a school's NAT lock
        its classmates out)."""
        seat = self.admitted.get(node_id) if node_id is not None else None
        if seat is not None:  # it joins again (a restart): its seat is still its own
            if not seat.acted:
                seat.at, seat.ip = now, ip
            return ""
        waiting = [
            k
            for k, s in self.admitted.items()
            if s.ip == ip and not s.acted and now - s.at < GRACE_S
        ]
        if len(waiting) >= WAITING_PER_ADDRESS:
            del self.admitted[min(waiting, key=lambda k: self.admitted[k].at)]
            self.lapsed_waiting += 1
        if len(self.admitted) >= self.students:
            lapsing = [(key, k) for k in self.admitted if (key := self._lapse(k, now)) is not None]
            if not lapsing:
                return "class_full"
            del self.admitted[min(lapsing)[1]]  # its seat lapses
        if node_id is not None:
            self.admitted[node_id] = Seat(now, ip)
        return ""

    def _lapse(self, node_id: str, now: float) -> tuple[int, float] | None:
        """(tier, since) when this seat may lapse for a newcomer, lower first; None: held."""
        s = self.admitted[node_id]
        if now - s.at < GRACE_S:
            return None
        if not s.acted:
            return 0, s.at
        n, at = self.work.get(node_id, (0, 0.0))
        if n == 0:
            return (1, s.acted_at) if now - s.acted_at >= ACTED_GRACE_S else None
        return (2, at) if now - at >= RECENT_WORK_S else None

    def heard(self, node_id: str, now: float = 0.0) -> None:
        """`node_id` sent something of its own (signed) or the host verified its groups."""
        seat = self.admitted.get(node_id)
        if seat is not None and not seat.acted:
            seat.acted, seat.acted_at = True, now

    def working(self, node_id: str, now: float) -> bool:
        """Whether the host verified groups of `node_id` within RECENT_WORK_S."""
        n, at = self.work.get(node_id, (0, 0.0))
        return n > 0 and now - at < RECENT_WORK_S

    def saw_work(self, received: dict[str, int], now: float) -> None:
        """The host's verified counts (cumulative): when each one last grew."""
        for node_id, n in received.items():
            had = self.work.get(node_id)
            if n > 0 and (had is None or n > had[0]):
                self.work[node_id] = (n, now)
                self.heard(node_id, now)
        while len(self.work) > 8 * max(256, self.students):  # ids that left long ago
            del self.work[min(self.work, key=lambda k: self.work[k][1])]

    def standing(self, node_id: str, host_id: str, signed: bool, now: float) -> int:
        """How strongly a row is held (higher keeps it): `signed`, it sent something of its own."""
        if node_id == host_id:
            return HOST
        seat = self.admitted.get(node_id)
        if seat is not None and (seat.acted or now - seat.at < GRACE_S):
            return ADMITTED
        n, at = self.work.get(node_id, (0, 0.0))
        if n > 0:
            return RECENT_WORK if now - at < RECENT_WORK_S else WORKED
        return SIGNED if signed else NOTHING

    def weakest(self, members: dict[str, Any], host_id: str, now: float) -> tuple[int, Any]:
        """(standing, member) of the row to give up first: the lowest standing, then the
        longest silent."""
        best: tuple[int, float, Any] | None = None
        for k, m in members.items():
            key = (self.standing(k, host_id, m.signed, now), m.last_seen, m)
            if best is None or key[:2] < best[:2]:
                best = key
        assert best is not None
        return best[0], best[2]


def vouched_ids(
    ids: set[str], host_id: str, verified: frozenset | None, admitted: frozenset | None
) -> frozenset:
    """The members the host vouches for: itself, those whose groups it verified, those it
    admitted; all of them where it knows neither (a board read back, a test)."""
    if verified is None and admitted is None:
        return frozenset(ids)
    return frozenset(
        k for k in ids if k == host_id or k in (verified or ()) or k in (admitted or ())
    )
