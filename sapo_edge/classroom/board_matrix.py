"""Who learned from whom on the class's board: per producer, the groups others trained on (and
rewarded), and the table of the most exchanging members (a class of 256 is not a 256 x 256
table); from the learned-from counts each member's row keeps as its rounds arrive."""

from __future__ import annotations

from typing import Any

from .board_rows import MemberRow


def learn(learned: dict[str, list[int]], old: Any, new: Any, dropped: Any, cap: int) -> None:
    """Keep a member's learned-from counts as its rounds arrive: a round reported again
    replaces its counts; at most `cap` producers (a hostile learner naming endless ids:
    counted in `dropped`)."""
    if old is not None:
        for producer, (t, r) in old.learned.items():
            pair = learned.get(producer)
            if pair is not None:
                pair[0], pair[1] = max(0, pair[0] - t), max(0, pair[1] - r)
    for producer, (t, r) in new.learned.items():
        pair = learned.get(producer)
        if pair is None:
            if len(learned) >= cap:
                dropped["learned_over_producers"] += 1
                continue
            pair = learned[producer] = [0, 0]
        pair[0] += t
        pair[1] += r


def given_by(members: list[Any], ids: set[str]) -> dict[str, list[int]]:
    """Per producer on the board: [groups others trained on, of those rewarded]."""
    given: dict[str, list[int]] = {}
    for m in members:
        for producer, (t, r) in m.learned.items():
            if producer != m.node_id and producer in ids:
                pair = given.setdefault(producer, [0, 0])
                pair[0] += t
                pair[1] += r
    return given


def learned_matrix(
    rows: list[MemberRow], members: dict[str, Any], matrix_members: int | None
) -> tuple[dict[str, dict[str, tuple[int, int]]], list[str]]:
    """Who learned from whom among the `matrix_members` most exchanging members (None: all
    with a round)."""
    # a solo baseline exchanges nothing: its row and column would be zeros (issue 57: the page
    # drew them, the terminal left them out)
    active = [row for row in rows if row.rounds and row.role != "baseline"]
    if matrix_members is not None and len(active) > matrix_members:  # the most exchanged
        by = {k: sum(t for t, _ in m.learned.values()) for k, m in members.items()}
        keep = sorted(active, key=lambda r: -(r.used_by_others + by[r.node_id]))
        keep_ids = {r.node_id for r in keep[:matrix_members]}
        active = [r for r in active if r.node_id in keep_ids]
    matrix_ids = [r.node_id for r in active]
    shown = set(matrix_ids)
    matrix: dict[str, dict[str, tuple[int, int]]] = {}
    for learner in (members[k] for k in matrix_ids):
        for producer, (t, r) in learner.learned.items():
            if producer in shown and producer != learner.node_id and t:
                matrix.setdefault(producer, {})[learner.node_id] = (t, r)
    return matrix, matrix_ids
