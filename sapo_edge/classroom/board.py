"""The host's record of the class: every member's verified (signed, but self-reported) per-round
figures, kept by node id so a member that leaves and comes back keeps its row; appended to
class.jsonl in the run folder; what each member says it is doing now (its progress: a row from
the moment it is in the room, before its first round ends; not saved); and snapshots of plain
values for the views and the report.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..swarm.progress import NOT_SCORED, Progress
from ..swarm.stats import MAX_REWARD, RoundStats
from .board_matrix import given_by, learn, learned_matrix
from .board_rows import (
    ClassSnapshot,
    RowParts,
    class_lines,
    display_names,
    member_row,
    scored_round,
)
from .board_seats import Seats, vouched_ids

CLASS_FILE = "class.jsonl"
# Bounds on what members' claims may cost the host (a round with 64 producers is ~16 KB in
# memory, ~4 KB in class.jsonl; identities are free to anyone in the room):
MAX_ROUNDS = 2_000  # rounds kept per member (the newest)
MAX_TOTAL_ROUNDS = 20_000  # rounds kept for the whole class (the largest rows give up theirs)
MEMBER_FILE_BYTES = 2 << 20  # class.jsonl bytes per member (~3,000 honest rounds; 256 members:
# 512 MiB at most); past it the view still shows its rounds, the file (and report) lacks them
MAX_LEARNED = 512  # producers one member's "learned from" counts keep (a class has <= 256)
MATRIX_MEMBERS = 16  # members the views' "who learned from whom" shows (the most active)
REPORTS_PER_ROUND = 2  # records per member: its rounds kept, twice over (a resumed run redoes a
# few rounds); past that its figures are refused and counted (an honest member never gets there)


@dataclass
class _Member:
    node_id: str
    latest: RoundStats | None  # its newest round's figures (None: only its progress so far)
    rounds: dict[int, RoundStats] = field(default_factory=dict)
    last_seen: float = 0.0
    records: int = 0  # figures recorded (new rounds and reports of a round again)
    saved_bytes: int = 0  # its lines in class.jsonl
    progress: Progress | None = None  # what it said it is doing, at progress_at
    progress_at: float = 0.0
    round_at: float = 0.0  # when its newest round's figures arrived
    learned: dict[str, list[int]] = field(default_factory=dict)  # producer -> [trained,
    # rewarded] over its rounds since the class began (kept as rounds arrive, not per snapshot)
    version: int = 0  # bumped on every change (the snapshot rebuilds only changed rows)
    signed: bool = False  # something of its own arrived (not only the host's word: "joining")

    def claimed(self) -> Progress | RoundStats:
        """Its newest claim with a name, model and backend (a round's figures, or its progress)."""
        if self.latest is None or (self.progress is not None and self.progress_at > self.round_at):
            return self.progress or self.latest  # type: ignore[return-value]
        return self.latest

    def state(self) -> str:
        if self._round_newer():
            return f"round {self.latest.round + 1} done"  # type: ignore[union-attr]
        return self.progress.describe() if self.progress is not None else ""

    def final(self) -> bool:
        """Its newest word ends its run (done, or left): no later word is coming."""
        last = None if self._round_newer() else self.progress
        return last is not None and last.phase in ("done", "stopped")

    def _round_newer(self) -> bool:
        return self.latest is not None and (
            self.progress is None or self.round_at >= self.progress_at
        )


class ClassBoard:
    """Thread-safe: the network loop records, the views take snapshots. `received` (optional)
    gives the groups the host's own transport verified per node id; `on_change` is called after
    each record (from the recording thread).

    At most `max_members` rows (the host's included). Identities are free to anyone with the
    room key, so on a full board a newcomer takes the row of the weakest member when it stands
    above it (board_seats.py: admitted by the host, recent verified work, ...; counted as
    `evicted`), else it is refused (`board_full`); admit() gives seats to newcomers that proved
    the code, at most `max_members - 1`, so every member the host admitted has a row."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        host_id: str = "",
        received: Callable[[], dict[str, int]] | None = None,
        max_members: int = 256,
        max_rounds: int = MAX_ROUNDS,
        max_total_rounds: int = MAX_TOTAL_ROUNDS,
        max_reward: float = MAX_REWARD,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path, self.host_id, self.received = path, host_id, received
        self.max_members, self.max_rounds, self.clock = max_members, max_rounds, clock
        self.max_total_rounds, self.max_reward = max_total_rounds, max_reward  # the class's
        # reward at most: 1 + its format bonus (a claim above it is refused, counted)
        self.admissions_known = False  # the host's admissions are here (live, or saved)
        self.max_member_bytes = MEMBER_FILE_BYTES
        self.total_rounds = 0  # rounds kept, all members together
        self.members: dict[str, _Member] = {}
        self.dropped: Counter = Counter()  # board_full, unsaved, unreadable (class.jsonl lines)
        self.on_change: Callable[[], None] | None = None
        self.hinted: Callable[[str], bool] = lambda _node_id: False  # sees the worked example
        self.seats = Seats(max_members - 1)
        self.removed: set[str] = set()  # members the teacher removed (rows kept, marked)
        self._lock = threading.Lock()
        self.version = 0  # bumped on every change
        self.rounds_version = 0  # bumped when rounds or rows change (not on progress)
        self._exchange: tuple[Any, ...] | None = None  # (key, given, matrix, matrix ids, means)
        self.row_builds = 0  # member rows rebuilt by snapshots (only those that changed)
        self._rows: dict[str, tuple[_Member, int, RowParts]] = {}  # id -> (row, version, parts)
        self._cached: tuple[Any, ...] | None = None  # (version, matrix bound, the figures)

    # ------------------------------------------------------------------ recording
    def record(self, sender: str, stats: RoundStats, at: float | None = None) -> bool:
        """Keep one round's figures of `sender` (a later report of the same round replaces it);
        False when the board is full of other members."""
        at = self.clock() if at is None else at
        if not 0.0 <= stats.reward <= self.max_reward:
            self.dropped["reward_out_of_range"] += 1
            return False
        received = self._received_for(sender)
        with self._lock:
            m = self._row(sender, received)
            if m is None:
                return False
            if m.records >= REPORTS_PER_ROUND * self.max_rounds:
                self.dropped["member_over_records"] += 1
                return False
            m.records += 1
            if m.latest is None or stats.round >= m.latest.round:
                m.latest, m.round_at = stats, at
            m.last_seen = max(m.last_seen, at)
            old = m.rounds.get(stats.round)
            self.total_rounds += old is None
            m.rounds[stats.round] = stats
            learn(m.learned, old, stats, self.dropped, MAX_LEARNED)
            m.version += 1
            self.version += 1
            self.rounds_version += 1
            while len(m.rounds) > self.max_rounds:
                self._forget_oldest(m)
            while self.total_rounds > self.max_total_rounds:
                largest = max(self.members.values(), key=lambda x: len(x.rounds))
                if len(largest.rounds) <= 1:
                    break  # every row keeps its newest round
                self._forget_oldest(largest)
            if self.path is not None:
                line = json.dumps({"at": at, "sender": sender, "stats": stats.to_json()}) + "\n"
                if m.saved_bytes + len(line) > self.max_member_bytes:
                    self.dropped["member_over_bytes"] += 1
                else:
                    try:
                        with open(self.path, "a", encoding="utf-8") as f:
                            f.write(line)
                        m.saved_bytes += len(line)
                    except OSError:  # a full disk: the view goes on, the report will lack it
                        self.dropped["unsaved"] += 1
        if self.on_change is not None:
            self.on_change()
        return True

    def _received_for(self, sender: str) -> dict[str, int] | None:
        """The host's verified counts when `sender` would need a row on a full board (else
        None); read before the board's lock is taken."""
        if sender in self.members or len(self.members) < self.max_members or self.received is None:
            return None
        return self._received()  # ({} on a transport bug: what else the host knows decides)

    def _row(
        self, sender: str, received: dict[str, int] | None = None, own: bool = True
    ) -> _Member | None:
        """The sender's row, a new one when there is room (lock held); on a full board the
        weakest row's when the sender stands above it (board_seats.py), else None. `own`:
        the sender's own word (not the host's "joining" for it)."""
        m = self.members.get(sender)
        if m is None:
            if len(self.members) >= self.max_members:
                now = self.clock()
                if received is not None:
                    self.seats.saw_work(received, now)
                mine = self.seats.standing(sender, self.host_id, own, now)
                theirs, gone = self.seats.weakest(self.members, self.host_id, now)
                if theirs >= mine:
                    self.dropped["board_full"] += 1
                    return None
                del self.members[gone.node_id]
                self.total_rounds -= len(gone.rounds)
                self.dropped["evicted"] += 1
            m = self.members[sender] = _Member(sender, None)
            self.rounds_version += 1  # another set of rows: who learned from whom moves
        if own:
            m.signed = True
            self.seats.heard(sender, self.clock())
        return m

    def working(self, node_id: str) -> bool:
        """Whether the host verified groups of `node_id` lately (board_seats.Seats.working)."""
        received, now = self._received(), self.clock()
        with self._lock:
            self.seats.saw_work(received, now)
            return self.seats.working(node_id, now)

    def _received(self) -> dict[str, int]:
        """The host's verified counts ({}: none, or a transport bug: it must not stop the view)."""
        try:
            return self.received() if self.received is not None else {}
        except Exception:  # noqa: BLE001
            return {}

    def admit(self, node_id: str | None, ip: str = "") -> str:
        """A seat for a newcomer that proved the code (Admissions.seat): "" admits it, else
        why not (`class_full`, `busy`: board_seats.py)."""
        with self._lock:
            now = self.clock()
            new = node_id is not None and node_id not in self.seats.admitted
            reason = self.seats.admit(node_id, ip, now)
            if new and not reason and self.path is not None:  # for the report's baseline
                try:
                    with open(self.path, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"at": now, "admitted": node_id}) + "\n")
                except OSError:
                    self.dropped["unsaved"] += 1
            return reason

    def teacher_said(self, node_id: str, word: str) -> None:
        """The teacher's word about `node_id` (progress.MEMBER_PHASES): removed (its rows stay,
        marked, out of the views and of the lesson's figures), readmitted, hinted or unhinted
        (its "(hint)" mark, drawn from the host's Hints); said in class.jsonl for the report."""
        with self._lock:
            if word in ("removed", "readmitted"):
                (self.removed.add if word == "removed" else self.removed.discard)(node_id)
            self.version += 1
            self.rounds_version += 1
            if self.path is not None:
                try:
                    with open(self.path, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"at": self.clock(), word: node_id}) + "\n")
                except OSError:
                    self.dropped["unsaved"] += 1
        if self.on_change is not None:
            self.on_change()

    def record_progress(
        self, sender: str, progress: Progress, at: float | None = None, own: bool = True
    ) -> bool:
        """What `sender` says it is doing now (kept in memory only); False when the board is
        full of other members. `own`: False for the host's word for it ("joining")."""
        at = self.clock() if at is None else at
        if progress.reward > self.max_reward:  # a scored round above the class's reward: not drawn
            self.dropped["reward_out_of_range"] += 1
            progress = replace(progress, reward=NOT_SCORED)
        received = self._received_for(sender)
        with self._lock:
            m = self._row(sender, received, own)
            if m is None:
                return False
            if at >= m.progress_at:
                before = scored_round(m)
                m.progress, m.progress_at = progress, at
                if scored_round(m) != before:  # a round's reward, before its figures
                    m.version += 1
                    self.rounds_version += 1
            m.last_seen = max(m.last_seen, at)
            self.version += 1  # its rounds did not change: its row's figures stand
        if self.on_change is not None:
            self.on_change()
        return True

    def heard_since(self, since: float) -> list[str]:
        """The node ids whose figures or progress arrived after `since` (unix time)."""
        with self._lock:
            return [k for k, m in self.members.items() if m.last_seen > since]

    def _forget_oldest(self, m: _Member) -> None:
        del m.rounds[min(m.rounds)]
        self.total_rounds -= 1
        m.version += 1
        self.rounds_version += 1

    def on_stats(self, verified: Any) -> None:
        """NetworkTransport.on_stats: a member's verified recent rounds (a round already here
        is kept unless its figures changed), or what it is doing now."""
        if verified.progress is not None:
            self.record_progress(verified.sender, verified.progress)
            return
        for stats in verified.rounds:
            with self._lock:
                m = self.members.get(verified.sender)
                same = m is not None and m.rounds.get(stats.round) == stats
            if not same:
                self.record(verified.sender, stats)

    @classmethod
    def load(
        cls, path: Path, host_id: str = "", received: dict[str, int] | None = None
    ) -> ClassBoard:
        """A board from a class.jsonl (for `sapo-edge report`): board_file.py."""
        from .board_file import load_board

        return load_board(cls, path, host_id, received)

    # ------------------------------------------------------------------ reading
    def snapshot(
        self, matrix_members: int | None = MATRIX_MEMBERS, *, removed: bool = False
    ) -> ClassSnapshot:
        """The class as plain values. Cheap when little changed: a member's row is rebuilt
        only when its figures changed, the learned-from counts are kept as rounds arrive, and
        the matrix holds the `matrix_members` most active members (None: all with a round).
        `removed`: with the rows of members the teacher removed (the report), marked."""
        received = self._received()
        verified = None if self.received is None else frozenset(k for k, n in received.items() if n)
        with self._lock:
            if received:
                self.seats.saw_work(received, self.clock())
            cached = self._cached
            if cached is None or cached[:3] != (self.version, matrix_members, verified):
                cached = self._cached = (
                    self.version,
                    matrix_members,
                    verified,
                    *self._figures(matrix_members, verified),
                )
        _v, _b, _f, rows, curves, mean, base, matrix, matrix_ids, tags = cached
        if self.received is not None:  # the host's counts move without the board changing
            rows = [
                replace(r, received_here=None if r.is_host else int(received.get(r.node_id, 0)))
                for r in rows
            ]
        now = self.clock()  # the host's own row is this process: heard now, paused or not
        rows = [replace(r, last_seen=now) if r.is_host else r for r in rows]
        if not removed and self.removed:
            rows = [r for r in rows if not r.removed]
            curves = {k: v for k, v in curves.items() if k not in self.removed}
        return ClassSnapshot(rows, curves, mean, base, matrix, now, matrix_ids, self.version, tags)

    def _figures(self, matrix_members: int | None, verified: frozenset | None) -> tuple[Any, ...]:
        """Rows (received_here left to the caller), curves, means, matrix, the tags curve (lock
        held). The class's lines are drawn from the host and the members whose groups it
        verified (all, without its counts), the baseline from baselines it admitted (all,
        without its admissions): a claim alone moves none (board_rows.class_lines)."""
        members = list(self.members.values())
        ids = {m.node_id for m in members}
        parts: dict[str, RowParts] = {}
        fresh: dict[str, tuple[_Member, int, RowParts]] = {}
        for m in members:
            had = self._rows.get(m.node_id)
            if had is None or had[0] is not m or had[1] != m.version:
                self.row_builds += 1
                had = (m, m.version, RowParts.of(m))
            fresh[m.node_id] = had
            parts[m.node_id] = had[2]
        self._rows = fresh  # rows of members no longer here go
        admitted = frozenset(self.seats.admitted) if self.admissions_known else None
        vouched = vouched_ids(ids, self.host_id, verified, admitted) - self.removed
        key = (self.rounds_version, matrix_members, vouched)
        if self._exchange is None or self._exchange[0] != key:  # progress alone: kept
            told = [m for m in members if m.node_id in vouched]
            self._exchange = (key, given_by(told, vouched), None, None, {})
        given = self._exchange[1]
        names = display_names(members)
        rows, curves = [], {}
        for m in sorted(members, key=lambda m: (m.node_id != self.host_id, names[m.node_id])):
            curves[m.node_id] = parts[m.node_id].curve
            given_pair = given.get(m.node_id, (0, 0))
            hinted = self.hinted(m.node_id)
            row = member_row(
                m, parts[m.node_id], names[m.node_id], given_pair, self.host_id, hinted
            )
            if m.node_id in self.removed:
                row = replace(row, removed=True)
            rows.append(row if m.node_id in vouched else replace(row, vouched=False))
        _key, _given, matrix, matrix_ids, means = self._exchange
        if matrix is None:
            told_rows = [r for r in rows if r.vouched]
            matrix, matrix_ids = learned_matrix(told_rows, self.members, matrix_members)
            self._exchange = (key, given, matrix, matrix_ids, means)
        roles = tuple((r.role, r.hinted) for r in rows)
        which = (roles, verified, admitted, frozenset(self.removed))
        if which not in means:  # board_rows.class_lines: what may draw the class's lines
            means.clear()
            means[which] = class_lines(rows, curves, verified, admitted)
        mean, base, tags = means[which]
        return rows, curves, mean, base, matrix, matrix_ids, tags
