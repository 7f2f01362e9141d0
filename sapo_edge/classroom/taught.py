"""What each member teaches (issue 57): the groups of theirs the host's own laptop trained on,
as it trained them (the question, each answer and the reward the host's verifier gave it), the
newest KEPT per member in memory for the class view (t on a row) and the page, and appended to
taught.jsonl in the class's folder (at most FILE_BYTES per member) for the report, which lists per
member the answers of theirs most trained on. Only the host's training is seen: classmates say
how many of a member's groups they trained on (its "used" column), not which.

Every text is made safe and cut here (textsafe.clean), once: a member's answers are hostile.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..data.textsafe import clean

TAUGHT_FILE = "taught.jsonl"
KEPT = 6  # groups per member kept for the view
MAX_MEMBERS = 1024  # members with groups kept (past it the one heard from longest ago goes)
QUESTION_CHARS, ANSWER_CHARS, ANSWERS = 300, 400, 8
FILE_BYTES = 256 << 10  # taught.jsonl per member


def item(round_: int, question: str, completions: Iterable[str], rewards: Iterable[float]) -> dict:
    """One group as the views show it: plain, safe, bounded."""
    answers = [
        [clean(text, ANSWER_CHARS, keep_newlines=True), round(float(r), 3)]
        for text, r in list(zip(completions, rewards, strict=False))[:ANSWERS]
    ]
    return {"round": int(round_), "question": clean(question, QUESTION_CHARS), "answers": answers}


class Taught:
    """Thread-safe: the host's training thread records, the views read."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._by: OrderedDict[str, deque[dict]] = OrderedDict()
        self._bytes: Counter = Counter()
        self._lock = threading.Lock()
        self.unsaved = 0

    def record(self, round_: int, groups: Iterable[Any]) -> None:
        """The peer groups the host's node trained on in round `round_` (ScoredGroup: origin,
        question, completions, rewards); its own ("self") are not teaching."""
        lines = []
        with self._lock:
            for g in groups:
                if g.origin == "self":
                    continue
                it = item(round_, g.question, g.completions, g.rewards)
                kept = self._by.pop(g.origin, None) or deque(maxlen=KEPT)
                kept.append(it)
                self._by[g.origin] = kept  # the newest heard last
                while len(self._by) > MAX_MEMBERS:
                    self._by.popitem(last=False)
                line = json.dumps({"producer": g.origin, **it}) + "\n"
                if self._bytes[g.origin] + len(line) <= FILE_BYTES:
                    self._bytes[g.origin] += len(line)
                    lines.append(line)
        if self.path is not None and lines:
            try:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.writelines(lines)
            except OSError:  # a full disk: the view goes on, the report lacks them
                self.unsaved += len(lines)

    def of(self, node_id: str) -> list[dict]:
        """The member's newest groups the host trained on, the newest first."""
        with self._lock:
            return list(reversed(self._by.get(node_id, ())))


def most_trained(path: Path, top: int = 3) -> dict[str, list[tuple[str, int]]]:
    """Per member, from a class's taught.jsonl: its answers the host trained on most often
    (rewarded ones), with how many times; unreadable lines are skipped."""
    counts: dict[str, Counter] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                    producer = obj["producer"]
                    for text, reward in obj["answers"]:
                        if float(reward) > 0 and isinstance(text, str) and text.strip():
                            counts.setdefault(str(producer), Counter())[text] += 1
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        return {}
    return {p: c.most_common(top) for p, c in counts.items()}
