"""Who in a class sees the worked example (`hint`, issue 45's lesson: the Aha that spreads): the
teacher's laptop, the first K students admitted, or both; the others never do. With strict
scoring the answer format is then a skill some laptops have and the rest must learn from them.

Each student's hint travels as its own format_example in its sealed welcome (Admissions.extra_for
hands it the class's settings with the example on or off); a student that joins again (the same
node id) keeps what it was given. Without `hint` every laptop follows the class's format_example.
The admission does not know a newcomer's role: a `join --baseline` student among the first K
takes one of the K (and trains with the example); a baseline meant to show a laptop without the
hint joins after them.

A hint goes to a laptop that trains: a holder whose groups the host has not verified lately
(`working`, the board's record) ACTED_GRACE_S after it was given gives its slot to the next
newcomer (issue 54: two scripted admissions 0.19 s after the code appeared took both examples,
no honest student got one and the slots never came back). The example it was sent cannot be
taken back from it; the view no longer marks it "(hint)".

The teacher may choose instead (`hint NAME` / `unhint NAME`: h in the class view, or a line on a
headless host's standard input): the host's signed word ("hinted"/"unhinted" progress naming the
member, said again with the removals by removal.Repeater) reaches the member, whose next round
is sampled and trained with the example on or off (HintWord, applied at the round's start so a
round's prompts never change under it); its welcome says the same if it joins again. From the
teacher's first choice on, only the teacher's choices decide: newcomers get no slot by coming
first. A modified client may ignore the word: what it learned from the example stays with it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config.checks import hint_plan
from ..config.settings import Config
from .board_seats import ACTED_GRACE_S
from .removal import find_member, tell

if TYPE_CHECKING:
    from ..rl.trainer import Node

HOST_HINT = (
    "that is this laptop: whether it sees the worked example is --hint's (host, or host,N) when "
    "the class starts"
)


class Hints:
    """The host's record of the hint: `invite(example)` is the class's settings as sent, with
    the worked example on or off."""

    def __init__(
        self,
        cfg: Config,
        invite: Callable[[bool], str],
        working: Callable[[str], bool] = lambda _node_id: True,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = lambda _m: None,
    ):
        plan = hint_plan(cfg.hint) or (False, 0)
        self.active, self.text = bool(cfg.hint), cfg.hint
        self.host, self.students = plan
        self.given: list[str] = []  # node ids given the example, in the order they joined
        self.given_at: dict[str, float] = {}
        self.chosen: dict[str, tuple[float, bool]] = {}  # the teacher's choices: (when, on)
        self.invite, self.working, self.clock, self.log = invite, working, clock, log
        self._lock = threading.Lock()  # the teacher's choices (UI thread) and the words' repeater

    def host_config(self, cfg: Config) -> Config:
        """The teacher's own node: the example when the hint names the host."""
        return dataclasses.replace(cfg, format_example=self.host) if self.active else cfg

    def class_config(self, cfg: Config) -> Config:
        """The settings every student without the hint gets."""
        return dataclasses.replace(cfg, format_example=False) if self.active else cfg

    def extra_for(self, node_id: str | None) -> str:
        """The welcome's settings for a newcomer that said it is `node_id` (None: it did not):
        the example for the first `students` of them, and again for any of those who rejoin."""
        if not self.active:
            return self.invite(None)  # as the class's settings say
        with self._lock:
            if node_id and not self.chosen and node_id not in self.given:
                if len(self.given) >= self.students:
                    self._free_idle_slot()
                if len(self.given) < self.students:
                    self.given.append(node_id)
                    self.given_at[node_id] = self.clock()
            # once the teacher chose, only its choices decide: nobody gets it by coming first
            holds = bool(node_id) and node_id in self.given
        return self.invite(holds)

    def choose(self, node_id: str, on: bool, at: float) -> bool:
        """The teacher gives `node_id` the worked example (`on`) or takes it back, at `at` (the
        host's clock, as its signed word says); True when that changed who holds it."""
        with self._lock:
            if on == (node_id in self.given):
                return False  # nothing changes: first-come allocation goes on as it was
            self.chosen[node_id] = (at, on)
            if on:
                self.given.append(node_id)
                self.given_at[node_id] = self.clock()
            else:
                self.given.remove(node_id)
                self.given_at.pop(node_id, None)
            return True

    def words(self) -> list[tuple[float, str, str]]:
        """(when, node id, "hinted"/"unhinted") for each of the teacher's choices (the
        Repeater's, with the removals)."""
        with self._lock:
            return [(at, k, "hinted" if on else "unhinted") for k, (at, on) in self.chosen.items()]

    def _free_idle_slot(self) -> None:
        """The slot of the longest-held holder that shows no verified work ACTED_GRACE_S after
        it was given the example, if any."""
        now = self.clock()
        idle = [
            k
            for k in self.given
            if now - self.given_at.get(k, now) >= ACTED_GRACE_S and not self.working(k)
        ]
        if idle:
            self.given.remove(idle[0])
            self.given_at.pop(idle[0], None)
            self.log(
                f"the worked example: {idle[0][:8]} showed no verified work since it was given "
                "it; its slot goes to the next student"
            )

    def _who(self, host: str, students: str, n: int | None = None) -> str:
        """'this laptop and the first 2 students': `host` names the teacher's laptop,
        `students` is a format of the count `n` (the hint's, by default; its 's' added)."""
        n = self.students if n is None else n
        who = [host] if self.host else []
        if n:
            who.append(students.format(n) + ("s" if n != 1 else ""))
        return " and ".join(who)

    def describe(self) -> str:
        """The host's log line: who sees the worked example."""
        who = self._who("this laptop", "the first {} student")
        return (
            f"the worked example: {who} (--hint {self.text}); the others never "
            "see it and answer right only inside <answer> tags once they learned the format"
        )

    def lesson(self) -> str:
        """One sentence for the projector page saying what this lesson shows ("" without a
        hint: the class's task line says enough)."""
        if not self.active:
            return ""
        with self._lock:  # once the teacher chose, the students holding it now
            n = len(self.given) if self.chosen else self.students
        who = self._who("the teacher's laptop", "{} student", n) or "no laptop"
        one = (1 if self.host else 0) + n == 1
        return (
            f"This lesson: {who} {'sees' if one else 'see'} a worked example of the answer "
            "format; the "
            "others do not. Only a right answer written inside <answer>...</answer> tags scores, "
            "so watch the share of answers in tags climb on the laptops without the example as "
            "they train on their classmates' rewarded answers."
        )

    def hinted(self, node_id: str, host_id: str) -> bool:
        """Does this member see the example (for the class view's rows)?"""
        if not self.active:
            return False
        return node_id in self.given or (node_id == host_id and self.host)


def teacher_hints(host: Any, who: str, on: bool) -> str:
    """The teacher gives the member `who` names the worked example (`on`) or takes it back:
    the host's record (its welcome if it joins again, the view's "(hint)") and the member told
    at once. Returns what to show the teacher; ValueError says what to type instead."""
    board, hints = host.board, host.hints
    if board is None or host.transport is None:
        raise ValueError("the class has not started")
    if not hints.active:
        raise ValueError(
            "every laptop of this class follows the class's settings for the worked example: "
            "start the class with --hint (e.g. --hint host,1) to choose who sees it"
        )
    node_id, name = find_member(board.snapshot().members, who, board.host_id, HOST_HINT)
    if not hints.choose(node_id, on, time.time()):
        return f"{name} {'already sees' if on else 'does not see'} the worked example"
    word = "hinted" if on else "unhinted"
    board.teacher_said(node_id, word)  # its "(hint)" mark, and class.jsonl
    tell(host, node_id, word)
    if on:
        return (
            f"{name} sees the worked example from its next round (unhint {name} takes it "
            "back); from now on only your choices give it, not who joins first"
        )
    return (
        f"{name} no longer sees the worked example from its next round (what it learned "
        "from it stays)"
    )


class HintWord:
    """A student's record of the teacher's choice about this laptop (the host's signed word):
    `heard(on, at)` on the network's thread, the newest word winning and none from before
    `since` (its welcome, which said where it stands: an older word replayed by a classmate is
    not heeded); `apply(node)` at the start of the node's round turns its format_example on or
    off for that round and the next ones."""

    def __init__(self, log: Callable[[str], None] = lambda _m: None, since: float = -1.0) -> None:
        self.log = log
        self.on: bool | None = None
        self.at = since
        self._lock = threading.Lock()

    def heard(self, on: bool, at: float) -> bool:
        with self._lock:
            if at < self.at:
                return False  # an older word than one heard (routes may reorder)
            changed, self.on, self.at = self.on != on, on, at
            return changed

    def apply(self, node: Node) -> None:
        with self._lock:
            on = self.on
        if on is None or node.cfg.format_example == on:
            return
        try:  # as any running setting: the node, its backend and its config.json (so a run
            node.configure({"format_example": on})  # continued alone asks as it trained)
        except ValueError as e:  # (ConfigError) nothing applied; said, and tried next round
            self.log(f"the teacher's worked example not applied: {e}")
            return
        self.log(
            "the teacher gave this laptop the worked example: this round's prompts show it"
            if on
            else "the teacher took the worked example back: this round's prompts leave it out"
        )
