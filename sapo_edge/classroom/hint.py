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
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..config.checks import hint_plan
from ..config.settings import Config
from .board_seats import ACTED_GRACE_S


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
        self.invite, self.working, self.clock, self.log = invite, working, clock, log

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
            return self.invite(False)
        if node_id and node_id not in self.given and len(self.given) >= self.students:
            self._free_idle_slot()
        if node_id and node_id not in self.given and len(self.given) < self.students:
            self.given.append(node_id)
            self.given_at[node_id] = self.clock()
        return self.invite(bool(node_id) and node_id in self.given)

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

    def _who(self, host: str, students: str) -> str:
        """'this laptop and the first 2 students': `host` names the teacher's laptop,
        `students` is a format of the count (its 's' added)."""
        who = [host] if self.host else []
        if self.students:
            who.append(students.format(self.students) + ("s" if self.students != 1 else ""))
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
        who = self._who("the teacher's laptop", "{} student")
        return (
            f"This lesson: {who} see a worked example of the answer format; the "
            "others do not. Only a right answer written inside <answer>...</answer> tags scores, "
            "so watch the share of answers in tags climb on the laptops without the example as "
            "they train on their classmates' rewarded answers."
        )

    def hinted(self, node_id: str, host_id: str) -> bool:
        """Does this member see the example (for the class view's rows)?"""
        if not self.active:
            return False
        return node_id in self.given or (node_id == host_id and self.host)
