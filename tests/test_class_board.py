"""The host's record of the class: rows by node id (names are claims: a copied name is told
apart, a copied derived name shows the sender's own), a later report of a round replaces it,
the number of members is capped, and a disk that refuses the record does not stop the view."""

from __future__ import annotations

from sapo_edge.classroom.board import ClassBoard
from sapo_edge.swarm.identity import name_for_id
from sapo_edge.swarm.stats import RoundStats

A, B, C = "a" * 32, "b" * 32, "c" * 32


def stats(round_: int, name: str, reward: float = 0.5, **kw) -> RoundStats:
    base = dict(shared=2, trained_local=1, trained_external=0, aha=0, learned={})
    base.update(kw)
    return RoundStats(round_, reward, name=name, model="m", backend="torch", device="cpu", **base)


def test_rows_are_node_ids_and_names_are_claims(tmp_path) -> None:
    board = ClassBoard(tmp_path / "class.jsonl")
    board.record(A, stats(0, "ada"))
    board.record(B, stats(0, "ada"))  # the same name: both shown, told apart by id
    board.record(C, stats(0, name_for_id(A)))  # A's derived name: C shows its own
    board.record(A, stats(0, "ada", reward=0.75))  # round 0 again: replaces it
    names = {m.node_id: m.name for m in board.snapshot().members}
    assert names == {A: f"ada#{A[:6]}", B: f"ada#{B[:6]}", C: name_for_id(C)}
    row = next(m for m in board.snapshot().members if m.node_id == A)
    assert row.rounds == 1 and row.rewards == [0.75]
    assert len((tmp_path / "class.jsonl").read_text().splitlines()) == 4


def test_members_are_capped_and_a_refusing_disk_does_not_stop_the_view(tmp_path) -> None:
    (tmp_path / "class.jsonl").mkdir()  # cannot be written as a file
    board = ClassBoard(tmp_path / "class.jsonl", max_members=2)
    assert board.record(A, stats(0, "ada")) and board.record(B, stats(0, "bob"))
    assert not board.record(C, stats(0, "cy"))
    assert board.dropped == {"board_full": 1, "unsaved": 2}
    assert [m.name for m in board.snapshot().members] == ["ada", "bob"]


def test_a_member_flooding_rounds_is_bounded_in_memory_and_on_disk(tmp_path) -> None:
    """Identities are free to anyone in the room: a member (or many) sending endless new round
    numbers and new figures for old ones keeps a bounded share of the board and of class.jsonl,
    and honest members keep their rows and rounds."""
    path = tmp_path / "class.jsonl"
    board = ClassBoard(path)
    board.max_rounds, board.max_total_rounds = 10, 15  # the defaults, scaled down
    for r in range(3):
        board.record(A, stats(r, "ada"))
    for hostile in (B, C):
        for r in range(200):
            board.record(hostile, stats(r, "spam", reward=0.1))
            board.record(hostile, stats(r, "spam", reward=0.2))  # the same round, new figures
    rows = {m.node_id: m for m in board.snapshot().members}
    assert rows[A].rewards == [0.5, 0.5, 0.5]
    assert rows[B].rounds <= 6 and rows[C].rounds <= 6  # the largest rows gave up their oldest
    assert sum(len(m.rounds) for m in board.members.values()) == board.total_rounds <= 15
    lines = path.read_text().splitlines()
    assert len(lines) <= 3 + 2 * 2 * 10
    assert board.dropped["member_over_records"] == 2 * 400 - 2 * 2 * 10
    board.max_member_bytes = 4_000  # and bytes on disk, whatever the size of each line
    big = {f"{i:032x}": (1, 1) for i in range(64)}
    for r in range(10):
        board.record(A, stats(3 + r, "ada", trained_external=64, learned=big))
    assert board.dropped["member_over_bytes"] > 0
    assert sum(len(x) + 1 for x in path.read_text().splitlines() if A in x[:80]) <= 4_000


def test_a_headless_host_reads_the_board_once_a_second_however_fast_members_report() -> None:
    """The board's on_change runs on the host's network loop for every record: a flood of
    records must not become a flood of snapshots there (each one walks the whole class)."""
    import time

    from sapo_edge.classroom.commands import RoundLines

    board, said, looks = ClassBoard(None), [], []
    take = board.snapshot

    def counted():
        looks.append(1)
        return take()

    board.snapshot = counted
    lines = RoundLines(board, said.append, every=0.5).start()
    try:
        for r in range(300):
            board.record(B, stats(r, "spam"))
        board.record(A, stats(0, "ada"))
        time.sleep(0.2)
    finally:
        lines.stop()
    assert len(looks) <= 3
    assert any("ada round 1" in s for s in said) and any("spam round 300" in s for s in said)


def test_a_member_cannot_name_itself_into_the_hosts_row() -> None:
    """The views mark the host's row "(host)" and a baseline's "(baseline)": a member's claimed
    name loses those marks, so 'Ms Smith (host)' cannot pass for the teacher."""
    board = ClassBoard(None, host_id=A)
    board.record(A, stats(0, "Ms Smith"))
    board.record(B, stats(0, "Ms Smith (host)"))
    board.record(C, stats(0, "  (HOST) [baseline] "))
    names = {m.node_id: m.name for m in board.snapshot().members}
    assert names == {A: f"Ms Smith#{A[:6]}", B: f"Ms Smith#{B[:6]}", C: name_for_id(C)}


def test_a_member_has_a_row_from_its_first_progress_and_it_says_what_it_does(tmp_path) -> None:
    """A row from a member's progress alone (its first round not done yet), not saved in
    class.jsonl; its state follows the newest of its progress and its rounds."""
    from sapo_edge.swarm.progress import Progress

    now = [100.0]
    board = ClassBoard(tmp_path / "class.jsonl", clock=lambda: now[0])
    board.record_progress(A, Progress("loading", rounds=20, name="ada", model="m"))
    (row,) = board.snapshot().members
    assert (row.name, row.state, row.rounds, row.recent_reward) == (
        "ada",
        "loading the model",
        0,
        None,
    )
    now[0] = 101.0
    board.record_progress(A, Progress("generating", 0, 20, 12, 48, "ada", "m", "torch", "cpu"))
    assert board.snapshot().members[0].state == "round 1 · generating 25%"
    now[0] = 102.0
    board.record(A, stats(0, "ada"))
    assert board.snapshot().members[0].state == "round 1 done"
    now[0] = 103.0
    board.record_progress(A, Progress("training", 1, 20, 1, 4, "ada", "m", "torch", "cpu"))
    row = board.snapshot().members[0]
    assert (row.state, row.rounds, row.backend) == ("round 2 · training 25%", 1, "torch · cpu")
    assert len((tmp_path / "class.jsonl").read_text().splitlines()) == 1  # rounds only


def test_a_full_board_gives_a_verified_member_the_row_of_the_longest_silent_unverified() -> None:
    """Rows on a full board: a member the host verified groups from takes the row of the
    longest silent member it never verified anything from; the host's own row and verified
    rows stay; an unverified newcomer is refused (counted)."""
    now, verified = [0.0], {B: 3}
    board = ClassBoard(
        host_id=A, received=lambda: dict(verified), max_members=3, clock=lambda: now[0]
    )
    for k, who in enumerate((A, B, C)):
        now[0] = k
        board.record(who, stats(0, f"m{k}"))
    D, E = "d" * 32, "e" * 32
    assert not board.record(D, stats(0, "dee"))  # unverified: the board stays as it is
    verified[D] = 1
    assert board.record(D, stats(0, "dee"))  # C: the only row the host never verified
    assert set(board.members) == {A, B, D} and board.total_rounds == 3
    verified[E] = 1
    assert not board.record(E, stats(0, "eve"))  # every other row is verified (or the host)
    assert board.dropped == {"board_full": 2, "evicted": 1}


def big_board(members: int = 256, rounds: int = 8) -> tuple[ClassBoard, list[str]]:
    ids = [f"{i:032x}" for i in range(members)]
    board = ClassBoard(host_id=ids[0])
    for r in range(rounds):
        for i, me in enumerate(ids):
            learned = {ids[(i + k) % members]: (1, k % 2) for k in range(1, 9)}
            board.record(me, stats(r, f"m{i}", trained_external=8, learned=learned))
    return board, ids


def test_a_class_of_256_costs_a_snapshot_only_what_changed_and_the_matrix_is_bounded() -> None:
    """Issue 31 #3: every second the class view rebuilt every row from every round and an N x N
    matrix (4.9-6.8 s a refresh at 256 members). Rows are rebuilt only when their member's
    figures changed, the learned-from counts are kept as rounds arrive (and agree with a count
    from scratch, a round reported again included), and the matrix holds the most active 16."""
    from sapo_edge.classroom.board import MATRIX_MEMBERS

    board, ids = big_board()
    snap = board.snapshot()
    assert board.row_builds == 256 and len(snap.members) == 256
    again = board.snapshot()
    assert board.row_builds == 256 and again.version == snap.version  # nothing changed
    # a round reported again with other figures replaces its counts
    board.record(ids[5], stats(7, "m5", trained_external=8, learned={ids[6]: (8, 8)}))
    snap = board.snapshot()
    assert board.row_builds == 257  # only that member's row
    expect: dict[str, list[int]] = {}
    for m in board.members.values():
        for s in m.rounds.values():
            for producer, (t, r) in s.learned.items():
                pair = expect.setdefault(producer, [0, 0])
                pair[0], pair[1] = pair[0] + t, pair[1] + r
    for row in snap.members:
        assert [row.used_by_others, row.rewarded_by_others] == expect.get(row.node_id, [0, 0])
    assert len(snap.matrix_ids) == MATRIX_MEMBERS
    assert set(snap.matrix) <= set(snap.matrix_ids)
    assert all(set(row) <= set(snap.matrix_ids) for row in snap.matrix.values())
    # what members are doing (a progress every 2 s from each) rebuilds no row and no counts
    from sapo_edge.swarm.progress import Progress

    given = board._exchange[1]
    for i, me in enumerate(ids):
        board.record_progress(me, Progress("generating", 8, 20, 1, 2, f"m{i}", "m", "t", "c"))
    snap = board.snapshot()
    assert board.row_builds == 257 and board._exchange[1] is given
    assert {row.state for row in snap.members} == {"round 9 · generating 50%"}
    assert len(board.snapshot(matrix_members=None).matrix_ids) == 256  # the report: everyone


def test_the_save_after_the_last_round_reads_done_not_saving() -> None:
    """A member whose run is over said 'round 9 · saving' for good (the real class check)."""
    from types import SimpleNamespace

    from sapo_edge.classroom.member import ClassMember

    said = []
    member = ClassMember(SimpleNamespace(on_phase=lambda *_a: None), None, progress=said.append)
    backend = SimpleNamespace(name="scripted", device="cpu")
    node = SimpleNamespace(
        round=4,
        cfg=SimpleNamespace(rounds=8),
        node_id="n",
        name="ann",
        model_id="m",
        backend=backend,
    )
    member.on_phase(node, "saving")  # a checkpoint mid-run
    node.round = 8
    member.on_phase(node, "saving")  # the save after the last round
    assert [p.phase for p in said] == ["saving", "done"]
    assert said[-1].describe() == "done after 8 rounds"


def test_admissions_get_seats_bounded_per_address_and_by_the_class_size() -> None:
    """Issue 44 #2: 300 real admissions from one address, each a fresh identity, were all
    let in. A newcomer that proved the code gets a seat on the board: at most 16 from one
    address still to be heard from (past it the oldest of them lapses: issue 54 #5), at most the
    class's size in all (the host's row aside); a seat nobody used lapses after two minutes when
    a newcomer needs it; one whose member did something never does, and a member joining again
    keeps its own."""
    from sapo_edge.classroom.board_seats import GRACE_S, WAITING_PER_ADDRESS
    from sapo_edge.swarm.progress import Progress

    now = [0.0]
    board = ClassBoard(host_id=A, max_members=21, clock=lambda: now[0])  # 20 students
    flood = [f"{i:032x}" for i in range(100, 140)]
    got = [board.admit(k, "10.0.0.66") for k in flood]
    assert got == [""] * len(flood)  # each one in, but the address holds 16 seats waiting
    assert set(board.seats.admitted) == set(flood[-WAITING_PER_ADDRESS:])
    assert board.seats.lapsed_waiting == len(flood) - WAITING_PER_ADDRESS
    students = [f"{i:032x}" for i in range(200, 210)]
    got = [board.admit(k, f"10.0.1.{i}") for i, k in enumerate(students)]
    assert got == [""] * 4 + ["class_full"] * 6  # 16 + 4: the class is full
    for k in students[:4]:  # these four are heard from: their seats are theirs
        board.record_progress(k, Progress("loading", name="s"))
    assert board.admit(students[0], "10.0.1.0") == ""  # joining again takes no other seat
    now[0] = GRACE_S + 1  # the flood's seats were never used
    got = [board.admit(k, f"10.0.2.{i}") for i, k in enumerate(students[4:])]
    assert got == [""] * 6
    assert set(board.seats.admitted) >= set(students)
    assert len(board.seats.admitted) == 20


def test_a_flood_from_a_schools_shared_address_never_locks_its_classmates_out() -> None:
    """Issue 54 #5: one code holder behind a school's NAT filled the 16 waiting places of the
    address the whole class shares, and every classmate after it was refused ("busy") for two
    minutes at a time. Now a classmate from that address always gets in; the flood still holds
    no more than 16 seats waiting, and a classmate heard from keeps its seat."""
    from sapo_edge.classroom.board_seats import WAITING_PER_ADDRESS
    from sapo_edge.swarm.progress import Progress

    board = ClassBoard(host_id=A, max_members=64, clock=lambda: 5.0)
    nat = "203.0.113.9"
    ada, bob = "a1" * 16, "b1" * 16
    assert board.admit(ada, nat) == ""
    board.record_progress(ada, Progress("loading", name="ada"))  # heard from: its seat stays
    puppets = [f"{i:032x}" for i in range(500, 540)]
    assert [board.admit(k, nat) for k in puppets] == [""] * len(puppets)
    assert board.admit(bob, nat) == ""  # was "busy"
    waiting = [k for k, s in board.seats.admitted.items() if not s.acted]
    assert len(waiting) == WAITING_PER_ADDRESS and bob in waiting
    assert ada in board.seats.admitted


def test_a_member_the_host_admitted_always_has_a_row() -> None:
    """Issue 44 #3: puppets that each sent one valid batch and one stats message were all
    "checked" and filled the board; an honest student who shares batches and stats was refused
    a row, and so was a stats-only student (the earlier lockout). Rows go by what the host
    knows: a member it admitted takes the row of one it did not, whatever that one did; one it
    did not admit gets a row only from one that stands lower."""
    from sapo_edge.swarm.progress import Progress

    now, verified = [0.0], {}
    board = ClassBoard(
        host_id=A, received=lambda: dict(verified), max_members=4, clock=lambda: now[0]
    )
    board.record(A, stats(0, "teacher"))
    puppets = ["d" * 32, "e" * 32, "f" * 32]
    for p in puppets:  # a checked batch and a stats message each
        verified[p] = 2
        board.record(p, stats(0, "puppet"))
    outsider = "9" * 32  # not admitted (a joiner of an earlier version): as good as a puppet
    verified[outsider] = 2
    assert not board.record(outsider, stats(0, "x"))
    honest, solo = B, C
    for k, name in ((honest, "ada"), (solo, "solo")):
        now[0] += 1
        assert board.admit(k, "10.0.0.2") == ""
        assert board.record_progress(k, Progress("joining", name=name), own=False)
    assert board.record(honest, stats(0, "ada"))  # shares batches and stats
    assert board.record_progress(solo, Progress("loading", name="solo", role="baseline"))
    assert set(board.members) == {A, honest, solo, puppets[2]}
    assert board.dropped == {"board_full": 1, "evicted": 2}


def test_rows_that_never_did_anything_keep_out_no_one() -> None:
    """Issue 44 #2: "joining" rows (admitted, then nothing) filled the board for good. Held
    for two minutes for a laptop on its way, such a row then gives way to any member that
    says something of its own."""
    from sapo_edge.classroom.board_seats import GRACE_S
    from sapo_edge.swarm.progress import Progress

    now = [0.0]
    board = ClassBoard(host_id=A, max_members=3, clock=lambda: now[0])
    board.record(A, stats(0, "teacher"))
    for k in (B, C):
        assert board.admit(k, "10.0.0.9") == ""
        board.record_progress(k, Progress("joining", name="idle"), own=False)
    member = "9" * 32  # signs its own progress, not admitted
    assert not board.record_progress(member, Progress("loading", name="real"))
    now[0] = GRACE_S + 1
    assert board.record_progress(member, Progress("loading", name="real"))
    assert member in board.members and len(board.members) == 3


def test_the_report_draws_the_mean_and_the_baseline_as_the_view_does(tmp_path) -> None:
    """Issue 44 #6: the class's mean comes from members whose groups the host verified, the
    baseline from baselines it admitted (class.jsonl keeps whom it admitted, so the report
    read back from it draws the same curves); a claim past the class's reward is refused."""
    path = tmp_path / "class.jsonl"
    board = ClassBoard(path, host_id=A, received=lambda: {B: 3}, max_reward=1.0)
    board.admissions_known = True
    for k in (B, C):
        assert board.admit(k, "192.168.1.9") == ""
    board.record(A, stats(0, "teacher", reward=0.5))
    board.record(B, stats(0, "bob", reward=0.3))
    board.record(C, stats(0, "solo", reward=0.2, role="baseline"))
    liar, liar2 = "d" * 32, "e" * 32  # never verified, never admitted: claims only
    assert not board.record(liar, stats(0, "liar", reward=1.5))  # past this class's reward
    board.record(liar, stats(0, "liar", reward=1.0))
    board.record(liar2, stats(0, "liar2", reward=0.0, role="baseline"))
    view = board.snapshot()
    assert len(view.members) == 5 and board.dropped["reward_out_of_range"] == 1
    assert view.swarm_mean == [(1, 0.4)] and view.baseline == [(1, 0.2)]
    report = ClassBoard.load(path, host_id=A, received={B: 3}).snapshot()
    assert (report.swarm_mean, report.baseline) == (view.swarm_mean, view.baseline)


def test_identities_the_host_never_vouched_for_do_not_write_the_lessons_story(tmp_path) -> None:
    """Issue 54: 40 identities never admitted and never sending a batch signed stats claiming a
    right tagged answer after training on B's groups; B was credited as the teacher of 40, and
    the story (matrix, first right answers, tags plot) showed puppets and no honest student.
    Also a name with full-width brackets passing the "(host)" filter."""
    from sapo_edge.classroom.board_rows import first_tagged_lines

    verified = {B: 4, C: 4}  # the host verified the groups of B and C
    board = ClassBoard(tmp_path / "class.jsonl", host_id=A, received=lambda: dict(verified))
    board.admissions_known = True
    for who in (B, C):
        board.seats.admit(who, "10.0.0.2", 0.0)
    board.record(A, stats(0, "teacher"))
    board.record(B, stats(0, "bea"))
    board.record(C, stats(0, "cy", learned={B: (2, 2)}))
    board.record(C, stats(1, "cy", learned={B: (2, 2)}, tagged=1.0, strict=1.0))
    puppets = [f"{i:032x}" for i in range(40)]
    for p in puppets:
        board.record(p, stats(0, "Ms Smith\uff08host\uff09", learned={B: (4, 4)}))
        board.record(p, stats(1, "Ms Smith\uff08host\uff09", tagged=1.0, strict=1.0))
    snap = board.snapshot(matrix_members=None)
    rows = {m.node_id: m for m in snap.members}
    assert rows[B].used_by_others == 4 and rows[B].rewarded_by_others == 4  # C's two rounds
    assert set(snap.matrix_ids) <= {A, B, C}
    assert all(learner in (A, B, C) for got in snap.matrix.values() for learner in got)
    lines = first_tagged_lines(snap.members)
    assert len(lines) == 1 and lines[0].startswith("cy")
    assert not any(rows[p].vouched for p in puppets) and rows[C].vouched
    assert all("host" not in rows[p].name.lower() for p in puppets)  # NFKC: the mark is cut


def test_seats_kept_by_one_signed_message_lapse_for_an_honest_student() -> None:
    """Issue 54 #3: a seat lapsed only if its member never did anything, so a puppet sending one
    signed progress message kept it for good: six puppets and one real student in a class of
    8 left every later student "class full", even with a new code. A seat is now held by work
    the host checks (its verified groups): one that only signed messages lapses for a newcomer
    once a first round's time has passed; the working student keeps its own."""
    from sapo_edge.classroom.board_seats import ACTED_GRACE_S, GRACE_S
    from sapo_edge.swarm.progress import Progress

    now, verified = [0.0], {}
    board = ClassBoard(
        host_id=A, received=lambda: dict(verified), max_members=8, clock=lambda: now[0]
    )  # 7 students
    puppets = [f"{i:032x}" for i in range(100, 106)]
    worker = B
    for i, k in enumerate([*puppets, worker]):
        assert board.admit(k, f"10.0.0.{i}") == ""
        board.record_progress(k, Progress("loading", name="x"))  # one signed message each
    late = [f"{i:032x}" for i in range(200, 207)]
    assert board.admit(late[0], "10.0.1.1") == "class_full"
    for step in range(1, 12):  # the worker's groups keep arriving, the puppets send nothing
        now[0] = step * 60.0 + GRACE_S
        verified[worker] = step
        board.snapshot()
    assert now[0] > ACTED_GRACE_S + GRACE_S
    got = [board.admit(k, f"10.0.1.{i}") for i, k in enumerate(late)]
    assert got == [""] * 6 + ["class_full"]  # the six puppets' seats, not the worker's
    assert worker in board.seats.admitted and not set(puppets) & set(board.seats.admitted)


def test_a_solo_baseline_is_left_out_of_who_learned_from_whom(tmp_path) -> None:
    """Issue 57: the page's matrix drew the baseline's row and column of zeros (the terminal
    left them out): it exchanges nothing, and no view shows it there now."""
    board = ClassBoard(tmp_path / "class.jsonl", host_id=A)
    board.record(A, stats(0, "teacher", learned={B: (1, 1)}))
    board.record(B, stats(0, "bea", learned={A: (2, 1)}))
    board.record(C, stats(0, "solo", role="baseline"))
    snap = board.snapshot(matrix_members=None)
    assert set(snap.matrix_ids) == {A, B} and C not in snap.matrix
