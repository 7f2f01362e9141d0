"""Who in a class sees the worked example (`hint`, issue 45's lesson: the Aha that spreads): the
teacher's laptop, the first K students admitted, or both; the others never do. With strict
scoring the answer format is then a skill some laptops have and the rest must learn from them.

Each student's hint travels as its own format_example in its sealed welcome (Admissions.extra_for
hands it the class's settings with the example on or off); a student that joins again (the same
node id) keeps what it was given. Without `hint` every laptop follows the class's format_example.
The admission does not know a newcomer's role: a `join --baseline` student among the first K
takes one of the K (and trains with the example); a baseline meant to show a laptop without the
hint joins after them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..config.checks import hint_plan
from ..config.settings import Config


class Hints:
    """The host's record of the hint: `invite(example)` is the class's settings as sent, with
    the worked example on or off."""

    def __init__(self, cfg: Config, invite: Callable[[bool], str]):
        plan = hint_plan(cfg.hint) or (False, 0)
        self.active, self.text = bool(cfg.hint), cfg.hint
        self.host, self.students = plan
        self.given: list[str] = []  # node ids given the example, in the order they joined
        self.invite = invite

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
        if node_id and node_id not in self.given and len(self.given) < self.students:
            self.given.append(node_id)
        return self.invite(bool(node_id) and node_id in self.given)

    def describe(self) -> str:
        """The host's log line: who sees the worked example."""
        who = ["this laptop"] if self.host else []
        if self.students:
            who.append(f"the first {self.students} student{'s' if self.students != 1 else ''}")
        return (
            f"the worked example: {' and '.join(who)} (--hint {self.text}); the others never "
            "see it and answer right only inside <answer> tags once they learned the format"
        )

    def hinted(self, node_id: str, host_id: str) -> bool:
        """Does this member see the example (for the class view's rows)?"""
        if not self.active:
            return False
        return node_id in self.given or (node_id == host_id and self.host)
