"""The teacher removes a member from the class (x in the class view, `remove NAME` on a headless
host) or lets it back (`readmit NAME`). The host's signed word ("removed"/"readmitted" progress
naming the member's node id, said at once and again every REPEAT_S for the newest REPEATED, so
a laptop that was away or joined later hears it too) reaches every member, which refuses the
member's links and batches from then on (swarm/removed.py), drops what it has of theirs waiting
and in its pool and trains on none of their groups (`Removals.apply`, at its node's next phase);
the host's admissions refuse that identity until the teacher lets it back. The removed laptop is
told (classroom/join.py) and may train alone.

A removal also replaces the room's secret keys (swarm/room_secret.py) and the join code: the
removed laptop held both, and under a fresh identity a modified client could still link to
classmates and send them groups, or join again. The others take the new secret over their own
links to the host; a later welcome carries it (Grant.rekey). The word that removes a member is
sealed before the keys change, so it reads it; one that was away hears it from the host when it
links again (its old key is let in for that, and the host refuses it as removed).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

REPEAT_S = 60.0  # the host says each removal again this often (a progress message each)
REPEATED = 8  # ...for the newest this many (a host's messages stay under members' rate limit)


class Removals:
    """The members out of the class as this laptop knows them (the host: the teacher's word; a
    student: the host's). `transport`: this laptop's NetworkTransport (refuses them at once);
    apply(pool) is called by the trainer's callback (ClassMember) at each phase. Thread-safe."""

    def __init__(self, transport: Any, since: float = -1.0) -> None:
        self.transport = transport
        self.since = since  # the host's time of this laptop's welcome: no older word heeded
        self.out: dict[str, float] = {}  # node id -> when (the host's clock, its signed word)
        self.said_at: dict[str, float] = {}  # node id -> time of the newest word heard for it
        self._pending: dict[str, bool] = {}  # node id -> refused, not yet applied to the pool
        self._lock = threading.Lock()

    def heard(self, node_id: str, removed: bool, at: float) -> bool:
        """The host's word `at` (its signed sending time) about `node_id`; an older word than
        one already heard is ignored (routes may reorder). True when it changed something."""
        with self._lock:
            if at < max(self.since, self.said_at.get(node_id, -1.0)):
                return False  # before what this laptop knows (its welcome, a newer word)
            self.said_at[node_id] = at
            if removed == (node_id in self.out):
                return False
            if removed:
                self.out[node_id] = at
            else:
                del self.out[node_id]
            self._pending[node_id] = removed
        if removed:
            self.transport.remove_member(node_id)
        else:
            self.transport.readmit_member(node_id)
        return True

    def apply(self, pool: Any) -> None:
        """Bring the node's pool in line (its groups of removed members go, none is kept; all
        of them when it is this laptop that was removed)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        own = self.transport.ident.node_id
        for node_id, removed in pending.items():
            pool.refuse_producer("*" if node_id == own else node_id, removed)

    def __contains__(self, node_id: object) -> bool:
        with self._lock:
            return node_id in self.out

    def words(self) -> list[tuple[float, str, str]]:
        """(when, node id, "removed") for each member out (the Repeater's)."""
        with self._lock:
            return [(at, node_id, "removed") for node_id, at in self.out.items()]


class Repeater:
    """The host's words about members said again every `every` seconds on a thread of its own,
    until stop(): `words()` gives the (when, node id, phase) to say (`say(node_id, phase)` each,
    REPEATED at most, in its order: the host puts removals first), so a laptop that was away or
    missed one hears it."""

    def __init__(
        self,
        words: Callable[[], list[tuple[float, str, str]]],
        say: Callable[[str, str], None],
        every: float | None = None,
    ) -> None:
        self.words, self.say = words, say
        self.every = REPEAT_S if every is None else every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="class-words", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for _at, node_id, phase in self.words()[:REPEATED]:
                self.say(node_id, phase)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)


HOST_IS = "that is this laptop, the host: q ends the class"


def find_member(rows: list[Any], who: str, host_id: str, host_is: str = HOST_IS) -> tuple[str, str]:
    """(node id, shown name) of the member the teacher named: its name as the view shows it
    (any case; 'name#3f2a1b' where two share one) or the start of its node id (8 hex or more).
    ValueError with what to type when none or several match, or it is the host."""
    want = who.strip().casefold()
    if not want:
        raise ValueError("say which member: its name as the class view shows it")
    by_name = [r for r in rows if r.name.casefold() == want]
    by_id = [r for r in rows if len(want) >= 8 and r.node_id.startswith(want)]
    found = by_name or by_id
    if len(found) > 1:
        ids = ", ".join(r.node_id[:8] for r in found[:4])
        raise ValueError(f"{len(found)} members match {who!r}: type more of its id ({ids})")
    if not found:
        raise ValueError(f"no member is called {who!r}: type a name as the class view shows it")
    row = found[0]
    if row.node_id == host_id:
        raise ValueError(host_is)
    return row.node_id, row.name


def teacher_says(host: Any, who: str, removed: bool = True) -> str:
    """The teacher removes the member `who` names (or lets it back): the host's own network and
    node at once, its board, its admissions (ClassHost._seat), and every member told. Returns
    what to show the teacher; ValueError says what to type instead."""
    import time

    board, transport = host.board, host.transport
    if board is None or transport is None:
        raise ValueError("the class has not started")
    node_id, name = find_member(board.snapshot(removed=True).members, who, board.host_id)
    if not host.removals.heard(node_id, removed, time.time()):
        return f"{name} is {'already out of' if removed else 'in'} the class"
    word = "removed" if removed else "readmitted"
    board.teacher_said(node_id, word)
    tell(host, node_id, word)  # sealed under the keys it holds: it hears it
    if removed:  # its laptop saw the code and held the keys: both are replaced
        secret = transport.replace_room_key(
            lambda key: holds_room_key(host, key), told=host.removals.__contains__
        )
        host.admissions.grant = dataclasses.replace(host.admissions.grant, rekey=secret)
        host.new_code()
        return (
            f"removed {name} from the class: no classmate links to it or trains on its groups "
            f"from now on, its laptop is told, the room's key is replaced and a new join code "
            f"is on the screen (readmit {name} lets it back)"
        )
    return f"{name} may join the class again (the code on the screen admits it)"


def holds_room_key(host: Any, node_id: str) -> bool:
    """Whether the host gives `node_id` the room's new secret: a member it admitted (its seat
    held) and did not remove. Called on the network's thread (a dict lookup each)."""
    return node_id in host.board.seats.admitted and node_id not in host.removals


def tell(host: Any, node_id: str, phase: str) -> None:
    """The host's signed word about `node_id` (a progress.MEMBER_PHASES phase) to every member,
    at once (any thread)."""
    from ..swarm.progress import Progress
    from .member import printable

    host.transport.stats.announce(Progress(phase, name=printable(host.name, 40), member=node_id))


VERBS = ("remove", "readmit", "hint", "unhint")


def teacher_line(host: Any, line: str, default: str = "") -> str:
    """A teacher's typed line, `remove NAME`, `readmit NAME`, `hint NAME` or `unhint NAME` (a
    bare NAME is `default`'s): what to tell the teacher; ValueError says what to type."""
    verb, _, rest = line.strip().partition(" ")
    verb = verb.casefold()
    if verb not in VERBS:
        verb, rest = default, line.strip()
    if verb not in VERBS or not rest.strip():
        raise ValueError(
            "type remove NAME (out of the class), readmit NAME (back in), hint NAME or unhint "
            "NAME (who sees the worked example), NAME as the class view shows it"
        )
    if verb in ("hint", "unhint"):
        return host.hint(rest.strip(), verb == "hint")
    return host.remove(rest.strip(), verb == "remove")


def read_teacher_lines(host: Any, stream: Any, say: Callable[[str], None]) -> threading.Thread:
    """A headless host's standard input, a line at a time: `remove NAME`, `readmit NAME`,
    `hint NAME`, `unhint NAME` (a daemon thread; it ends at the end of the input)."""

    def run() -> None:
        try:
            for line in stream:
                if not line.strip():
                    continue
                try:
                    say(teacher_line(host, line))
                except ValueError as e:
                    say(str(e))
        except (OSError, ValueError):  # no input to read (closed, or a test's capture)
            return

    thread = threading.Thread(target=run, name="teacher-lines", daemon=True)
    thread.start()
    return thread
