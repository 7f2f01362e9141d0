"""Reading a class back from its class.jsonl (for `sapo-edge report`): every member's rounds as
the host recorded them, and whom the host admitted (a baseline's curve counts only then);
unreadable lines are counted, never fatal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..swarm.peerbook import is_node_id
from ..swarm.progress import MEMBER_PHASES
from ..swarm.protocol import ProtocolError
from ..swarm.stats import RoundStats
from .board_seats import Seat

LOADED_MEMBERS = 4096  # rows a report's board holds: everyone who had one (churn included)


def load_board(
    cls: Any, path: Path, host_id: str = "", received: dict[str, int] | None = None
) -> Any:
    """A ClassBoard (`cls`) from `path`. `received`: the host's verified counts (members it
    vouches for keep their rows, and they alone make the class's mean)."""
    board = cls(
        None,
        host_id=host_id,
        received=None if received is None else lambda: received,
        max_members=LOADED_MEMBERS,
    )
    with open(path, encoding="utf-8", errors="replace") as f:  # a torn byte: its line only
        for line in f:
            try:
                obj = json.loads(line)
                admitted = obj.get("admitted") if isinstance(obj, dict) else None
                if isinstance(admitted, str) and is_node_id(admitted):
                    board.seats.admitted[admitted] = Seat(0.0, "", acted=True)
                    board.admissions_known = True
                    continue
                said = [(w, obj.get(w)) for w in MEMBER_PHASES if w in obj]
                if said and isinstance(said[0][1], str) and is_node_id(said[0][1]):
                    if said[0][0] in ("removed", "readmitted"):  # a hint leaves the rows alone
                        word = said[0][0] == "removed"
                        (board.removed.add if word else board.removed.discard)(said[0][1])
                    continue
                sender = obj["sender"]
                if not (isinstance(sender, str) and len(sender) == 32):
                    raise ValueError("sender")
                board.record(sender, RoundStats.from_json(obj["stats"]), float(obj["at"]))
            except (ValueError, KeyError, TypeError, ProtocolError):
                board.dropped["unreadable"] += 1
    board.path = path
    return board
