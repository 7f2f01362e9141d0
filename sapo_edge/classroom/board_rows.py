"""What the views see of the class's board: a member's row (MemberRow) and the class at one
moment (ClassSnapshot), and the pieces a snapshot is built from: a row's parts from its rounds,
the names shown (made safe, told apart), the class's mean per round."""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ..data.textsafe import clean
from ..swarm.identity import name_for_id
from ..swarm.peerbook import peer_name

RECENT = 5  # "reward, last 5 rounds"


@dataclass(frozen=True)
class MemberRow:
    """One member as the class view shows it. Everything but `received_here` is the member's
    own signed claim (or, for used_by_others, what the others claim)."""

    node_id: str
    name: str  # cleaned; 'name#3f2a1b' when two members show one name
    backend: str  # 'torch · cpu'
    model: str
    role: str  # "member" or "baseline"
    is_host: bool
    rounds: int  # rounds reported
    last_round: int  # the newest round reported (0-based)
    rewards: list[float]  # one per reported round, oldest first (and the round scored now)
    recent_reward: float | None  # mean over the last RECENT reported rounds
    shared: int  # groups it published
    used_by_others: int  # groups of its that others trained on
    rewarded_by_others: int  # ...and that their verifiers rewarded
    aha: int
    received_here: int | None  # groups the host itself verified from it (None: the host, or
    # a board read back from class.jsonl without the host's counts)
    last_seen: float  # unix time of its newest figures or progress
    state: str = ""  # what it says it is doing: 'round 3 · generating 40%', 'round 2 done'
    final: bool = False  # that word ends its run (done, left): the views show it however old
    # the Aha lesson (issue 45): its newest round's share of answers in tags and strict reward
    # (None: not said), the first round (1-based) it answered right inside the tags (0: not
    # yet), whom it had trained on most rewarded groups from before then ("": nobody), and
    # whether it sees the worked example (the teacher's hint)
    tagged: float | None = None
    strict: float | None = None
    first_tagged: int = 0
    taught_by: str = ""
    hinted: bool = False
    # the host admitted it or verified its groups (or it is the host): only such rows tell the
    # lesson's story (who learned from whom, first right answers, the tags plot); a claim alone
    # from an identity nobody vouched for does not (issue 54)
    vouched: bool = True
    removed: bool = False  # the teacher removed it from the class (only the report shows it)
    tags_curve: list[tuple[int, float, float]] = field(default_factory=list)  # (round, 1-based;
    # share in tags; strict reward) of the rounds that said them


@dataclass(frozen=True)
class ClassSnapshot:
    members: list[MemberRow]
    curves: dict[str, list[tuple[int, float]]]  # node id -> (round, 1-based; reward)
    swarm_mean: list[tuple[int, float]]  # mean of the members (not baselines) per round
    baseline: list[tuple[int, float]]  # mean of the solo baselines per round (empty: none)
    matrix: dict[str, dict[str, tuple[int, int]]]  # producer -> learner -> (trained, rewarded)
    now: float
    matrix_ids: list[str] = field(default_factory=list)  # the members in `matrix`, in order
    version: int = 0  # the board's version: equal versions, equal figures (not `now`/received)
    # the share of answers inside the tags per round (1-based), the lesson's live curve: "class"
    # (the members without the hint), "hint" (those with it), "baseline" (the solo baselines);
    # drawn from the rows the class's mean is drawn from (class_lines), one point a round at most
    tags: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the projector page and class.json (lists, no tuples)."""
        return {
            # each member's tags_curve stays out (256 of them: the page's JSON would grow with
            # the class); the page draws `tags`, the class's few means
            "members": [
                {k: v for k, v in asdict(m).items() if k != "tags_curve"} for m in self.members
            ],
            "curves": {k: [list(p) for p in v] for k, v in self.curves.items()},
            "swarm_mean": [list(p) for p in self.swarm_mean],
            "baseline": [list(p) for p in self.baseline],
            "matrix": {a: {b: list(c) for b, c in row.items()} for a, row in self.matrix.items()},
            "matrix_ids": list(self.matrix_ids),
            "first_tagged": first_tagged_lines(self.members),
            # the tags curve as a few means (bounded by the rounds, not by the class's size)
            "tags": {k: [list(p) for p in v] for k, v in self.tags.items()},
            "now": self.now,
        }


@dataclass(frozen=True)
class RowParts:
    """What a member's row needs from its rounds (rebuilt only when they change)."""

    curve: list[tuple[int, float]]  # (round, 1-based; reward), oldest first
    shared: int
    aha: int
    tagged: float | None = None  # the newest round's that said them
    strict: float | None = None
    first_tagged: int = 0  # MemberRow's
    taught_by: str = ""
    tags_curve: list[tuple[int, float, float]] = field(default_factory=list)

    @classmethod
    def of(cls, m: Any) -> RowParts:
        ordered = [m.rounds[k] for k in sorted(m.rounds)]
        curve = [(s.round + 1, s.reward) for s in ordered]
        scored = scored_round(m)
        if scored is not None:  # the round under way, scored: its point before its train step
            curve.append((scored[0] + 1, scored[1]))
        said = [s for s in ordered if s.tagged is not None and s.strict is not None]
        first, taught_by = first_tagged(ordered)
        return cls(
            curve,
            sum(s.shared for s in ordered),
            sum(s.aha for s in ordered),
            said[-1].tagged if said else None,
            said[-1].strict if said else None,
            first,
            taught_by,
            [(s.round + 1, s.tagged, s.strict) for s in said],
        )


def first_tagged(ordered: list[Any]) -> tuple[int, str]:
    """(the first round, 1-based, whose strict reward is above 0; the producer whose groups it
    had trained on most rewarded ones of in the rounds before it), or (0, "") before any such
    round. A round's answers come before its train step: what taught it is in earlier rounds."""
    for k, s in enumerate(ordered):
        if s.strict is not None and s.strict > 0:
            rewarded: dict[str, tuple[int, int]] = {}
            for earlier in ordered[:k]:
                for producer, (t, r) in earlier.learned.items():
                    had = rewarded.get(producer, (0, 0))
                    rewarded[producer] = (had[0] + r, had[1] + t)
            best = max(rewarded.items(), key=lambda kv: (kv[1], kv[0]), default=("", (0, 0)))
            return s.round + 1, best[0] if best[1][0] > 0 else ""
    return 0, ""


def scored_round(m: Any) -> tuple[int, float] | None:
    """(round, reward) of the member's round under way once its answers are scored (its
    progress says so), while its figures for that round have not arrived; else None."""
    p = m.progress
    if p is None or p.reward < 0 or p.round in m.rounds:
        return None
    if m.rounds and p.round < max(m.rounds):
        return None
    return p.round, p.reward


# The views add "(host)", "(baseline)", "(hint)" and "(removed)" after the names of those rows (row_marks): a
# member's own name cannot carry them (a student's "Ms Smith (host)" row must not pass for the
# teacher's).
_MARK = r"(host|baseline|hint|removed)"
MARKS = re.compile(rf"(\s*[(\[]\s*{_MARK}(\s*,\s*{_MARK})*\s*[)\]])+\s*$", re.IGNORECASE)


def row_marks(row: MemberRow) -> str:
    """' (host)', ' (baseline)', ' (host, hint)' (it sees the worked example), ' (removed)'
    (the teacher removed it) or ''."""
    marks = ["host"] if row.is_host else ["baseline"] if row.role == "baseline" else []
    marks += ["hint"] if row.hinted else []
    marks += ["removed"] if row.removed else []
    return f" ({', '.join(marks)})" if marks else ""


def display_names(members: list[Any]) -> dict[str, str]:
    """Announced names made safe (a copied derived name shows the sender's own; the views'
    row marks are not part of a name); two members showing one name are told apart by ids."""
    names = {
        m.node_id: MARKS.sub(
            "", unicodedata.normalize("NFKC", peer_name(m.claimed().name, m.node_id))
        ).strip()
        or name_for_id(m.node_id)
        for m in members
    }
    counts = Counter(names.values())
    return {k: f"{v}#{k[:6]}" if counts[v] > 1 else v for k, v in names.items()}


def mean_by_round(
    rows: list[MemberRow], curves: dict[str, list[tuple[int, float]]], role: str
) -> list[tuple[int, float]]:
    """The mean reward per round of the rows with `role` (_mean)."""
    return _mean([curves[row.node_id] for row in rows if row.role == role])


def _mean(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The mean per round of `curves`, over the rounds most of them (more than half of those
    with a round) have: a round only the fastest reached is not the class's (one member's 0.41
    drawn as the class mean)."""
    by_round: dict[int, list[float]] = {}
    members = 0
    for curve in curves:
        members += bool(curve)
        for r, value in curve:
            by_round.setdefault(r, []).append(value)
    return [(r, statistics.fmean(v)) for r, v in sorted(by_round.items()) if 2 * len(v) > members]


def tags_by_round(rows: list[MemberRow]) -> dict[str, list[tuple[int, float]]]:
    """The share of answers inside the tags per round: the mean of the members without the hint
    ("class"), of those with it ("hint"), of the solo baselines ("baseline"); a group with no
    such figures is left out."""
    groups: dict[str, list[list[tuple[int, float]]]] = {}
    for row in rows:
        group = "baseline" if row.role == "baseline" else "hint" if row.hinted else "class"
        groups.setdefault(group, []).append([(r, tagged) for r, tagged, _ in row.tags_curve])
    means = {k: _mean(v) for k, v in groups.items()}
    return {k: means[k] for k in ("class", "hint", "baseline") if means.get(k)}


def class_lines(
    rows: list[MemberRow],
    curves: dict[str, list[tuple[int, float]]],
    verified: frozenset | None,
    admitted: frozenset | None,
) -> tuple[list[tuple[int, float]], list[tuple[int, float]], dict[str, list]]:
    """The class's mean reward per round, the solo baselines' and the share in tags
    (tags_by_round), drawn from the host, the members whose groups it verified (all, without
    its counts) and the baselines it admitted (all, without its admissions), none removed: a
    claim alone moves none of them (issue 44), nor a puppet the lesson's story (issue 57)."""
    counted = [
        r
        for r in rows
        if not r.removed
        and (
            r.is_host
            or (r.role == "baseline" and (admitted is None or r.node_id in admitted))
            or (r.role != "baseline" and (verified is None or r.node_id in verified))
        )
    ]
    return (
        mean_by_round(counted, curves, "member"),
        mean_by_round(counted, curves, "baseline"),
        tags_by_round(counted),
    )


def first_tagged_lines(rows: list[MemberRow], cut: Any = lambda name: name) -> list[str]:
    """One line per member that answered right inside the tags, in the order it first did:
    'ada: right in tags from round 7, after trainer's groups' (whose rewarded groups it had
    trained on most), '... (its own hint)' for a member that sees the worked example, '... on
    its own' when it had trained on no rewarded group of anyone's before. `cut` shortens the
    names (a terminal panel)."""
    names = {r.node_id: cut(r.name) for r in rows}
    lines = []
    told = (r for r in rows if r.first_tagged and r.vouched)
    for r in sorted(told, key=lambda r: (r.first_tagged, r.name)):
        if r.hinted:
            how = " (it has the hint)"
        elif r.taught_by:
            how = f", after {names.get(r.taught_by, r.taught_by[:8])}'s groups"
        else:
            how = ", on its own"
        lines.append(f"{names[r.node_id]}: right in tags from round {r.first_tagged}{how}")
    return lines


def member_row(
    m: Any, p: RowParts, name: str, given: tuple[int, int], host_id: str, hinted: bool
) -> MemberRow:
    """A board member's row from its parts: `given` is (its groups others trained on, of those
    rewarded); received_here is the caller's (the host's own counts)."""
    s = m.claimed()
    return MemberRow(
        node_id=m.node_id,
        name=name,
        backend=f"{clean(s.backend, 20)} · {clean(s.device, 20)}" if s.backend else "",
        model=clean(s.model, 120),
        role=s.role,
        is_host=m.node_id == host_id,
        rounds=len(m.rounds),  # reported (the curve may add one scored now)
        last_round=max(m.rounds, default=-1),
        rewards=[v for _, v in p.curve],
        recent_reward=statistics.fmean([v for _, v in p.curve[-RECENT:]]) if p.curve else None,
        shared=p.shared,
        used_by_others=given[0],
        rewarded_by_others=given[1],
        aha=p.aha,
        received_here=None,
        last_seen=m.last_seen,
        state=clean(m.state(), 60),
        final=m.final(),
        tagged=p.tagged,
        strict=p.strict,
        first_tagged=p.first_tagged,
        taught_by=p.taught_by,
        hinted=hinted,
        tags_curve=p.tags_curve,
    )
