"""The Aha lesson on the class's board (issue 45): a member's share of answers in tags and its
strict reward travel with its figures (bounded, optional for an older member), the rows say
them, the first round each answered right inside the tags and whose groups it had trained on
most before, and the class report plots them."""

from __future__ import annotations

import json

import pytest

from sapo_edge.classroom.board import ClassBoard
from sapo_edge.classroom.board_rows import first_tagged_lines
from sapo_edge.classroom.report import write_report
from sapo_edge.swarm.protocol import ProtocolError
from sapo_edge.swarm.stats import RoundStats

TEACHER, ADA, BOB = "a" * 32, "b" * 32, "c" * 32


def stats(round_, name, tagged=None, strict=None, learned=None) -> RoundStats:
    learned = learned or {}
    return RoundStats(
        round_,
        strict or 0.0,
        shared=4,
        trained_local=2,
        trained_external=sum(t for t, _ in learned.values()),
        aha=0,
        learned=learned,
        name=name,
        model="m",
        backend="torch",
        device="cpu",
        tagged=tagged,
        strict=strict,
    )


def test_tags_and_strict_go_over_the_wire_and_are_bounded():
    s = stats(3, "ada", tagged=0.75, strict=0.5)
    assert RoundStats.from_json(json.loads(json.dumps(s.to_json()))) == s
    old = stats(3, "ada").to_json()  # a member that does not say them
    assert "tagged" not in old and RoundStats.from_json(old).strict is None
    for bad in ({"tagged": 1.5}, {"strict": -0.1}, {"strict": "0.5"}, {"tagged": True}):
        with pytest.raises(ProtocolError):
            RoundStats.from_json({**old, **bad})


def _board(tmp_path) -> ClassBoard:
    """The teacher tags from round 1; ada trains on 3 rewarded groups of the teacher's in rounds
    1-2 and answers right in tags at round 3; bob trains on ada's and the teacher's (1 rewarded
    each) and on 2 of ada's in round 3, and is right from round 4; nobody else is."""
    board = ClassBoard(tmp_path / "class.jsonl", host_id=TEACHER)
    board.hinted = lambda node_id: node_id == TEACHER
    for r in range(5):
        board.record(TEACHER, stats(r, "teacher", tagged=1.0, strict=0.75))
    ada = [stats(0, "ada", 0.0, 0.0), stats(1, "ada", 0.0, 0.0, {TEACHER: (2, 2)})]
    ada += [stats(2, "ada", 0.25, 0.0, {TEACHER: (2, 1)}), stats(3, "ada", 0.5, 0.25)]
    bob = [stats(0, "bob", 0.0, 0.0, {TEACHER: (1, 1), ADA: (1, 1)})]
    bob += [stats(1, "bob", 0.0, 0.0), stats(2, "bob", 0.0, 0.0, {ADA: (2, 2)})]
    bob += [stats(3, "bob", 0.25, 0.0), stats(4, "bob", 0.5, 0.5)]
    for s in ada:
        board.record(ADA, s)
    for s in bob:
        board.record(BOB, s)
    return board


def test_rows_say_tags_strict_and_the_first_right_answer_in_tags(tmp_path):
    snap = _board(tmp_path).snapshot()
    rows = {r.name: r for r in snap.members}
    assert (rows["ada"].tagged, rows["ada"].strict) == (0.5, 0.25)
    assert (rows["ada"].first_tagged, rows["ada"].taught_by) == (4, TEACHER)
    assert (rows["bob"].first_tagged, rows["bob"].taught_by) == (5, ADA)  # 3 of ada's, 1 teacher's
    assert rows["teacher"].first_tagged == 1 and rows["teacher"].hinted
    assert rows["bob"].tags_curve[-1] == (5, 0.5, 0.5)
    assert first_tagged_lines(snap.members) == [
        "teacher: right in tags from round 1 (it has the hint)",
        "ada: right in tags from round 4, after teacher's groups",
        "bob: right in tags from round 5, after ada's groups",
    ]
    assert snap.to_json()["first_tagged"][2].startswith("bob")


def test_a_member_right_in_tags_before_any_rewarded_group_found_it_on_its_own(tmp_path):
    board = ClassBoard(tmp_path / "class.jsonl")
    board.record(ADA, stats(0, "ada", 0.0, 0.0, {BOB: (3, 0)}))  # trained on, none rewarded
    board.record(ADA, stats(1, "ada", 0.5, 0.25))
    row = board.snapshot().members[0]
    assert (row.first_tagged, row.taught_by) == (2, "")
    assert first_tagged_lines([row]) == ["ada: right in tags from round 2, on its own"]


def test_the_class_report_plots_tags_and_strict_and_tables_them(tmp_path):
    _board(tmp_path)
    paths = write_report(tmp_path)
    assert tmp_path / "answers_in_tags.png" in paths
    assert (tmp_path / "answers_in_tags.png").stat().st_size > 10_000
    data = json.loads((tmp_path / "class.json").read_text())
    ada = next(m for m in data["members"] if m["name"] == "ada")
    assert (ada["first_right_in_tags"], ada["taught_by"], ada["strict_last"]) == (4, TEACHER, 0.25)
    assert data["first_right_in_tags"][1].startswith("ada")


def test_a_class_whose_members_said_no_tags_has_no_tags_plot(tmp_path):
    board = ClassBoard(tmp_path / "class.jsonl")
    board.record(ADA, stats(0, "ada"))
    assert not any(p.name == "answers_in_tags.png" for p in write_report(tmp_path))


def test_the_class_view_shows_tags_strict_the_hint_and_whom_each_first_learned_from(tmp_path):
    import asyncio

    from sapo_edge.tui.class_view import ClassUpdated, ClassView
    from sapo_edge.tui.widgets.class_widgets import LearnedMatrix, MembersTable

    board = _board(tmp_path)
    app = ClassView(None, start=False)

    async def look() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            app.post_message(ClassUpdated(board.snapshot(), "3 members · x"))
            await pilot.pause()
            table = app.query_one(MembersTable)
            columns = [str(c.label) for c in table.columns.values()]
            rows = {table.get_row_at(i)[0].plain: table.get_row_at(i) for i in range(3)}
            ada = rows["ada"]
            tags, strict = columns.index("tags"), columns.index("strict")
            assert (ada[tags].plain, ada[strict].plain) == ("50%", "0.25")
            assert "teacher (host, hint)" in rows
            shown = app.query_one(LearnedMatrix).query_one("Static").render()
            text = str(shown)
            assert "3*" in text  # teacher -> ada: her first right answer in tags followed them
            assert "bob: right in tags from round 5, after ada's groups" in text

    asyncio.run(look())


def test_a_member_cannot_name_itself_into_the_hint_or_the_host(tmp_path):
    """The views add '(hint)' and '(host)' after names: a student's own name cannot carry them."""
    board = ClassBoard(tmp_path / "class.jsonl", host_id=TEACHER)
    board.record(ADA, stats(0, "Mallory (host, hint)"))
    board.record(BOB, stats(0, "Bob [hint]"))
    rows = {r.node_id: r for r in board.snapshot().members}
    assert (rows[ADA].name, rows[BOB].name) == ("Mallory", "Bob")
    assert not rows[ADA].hinted and not rows[BOB].hinted


def test_a_class_file_line_with_a_huge_number_is_skipped_not_a_crash(tmp_path):
    from sapo_edge.classroom.board_file import load_board

    good = {"at": 1.0, "sender": ADA, "stats": stats(0, "ada", 0.5, 0.25).to_json()}
    huge = {"at": 1.0, "sender": BOB, "stats": {**stats(0, "bob").to_json(), "reward": 0}}
    lines = [json.dumps(good), json.dumps(huge).replace('"reward": 0', '"reward": ' + "9" * 400)]
    (tmp_path / "class.jsonl").write_text("\n".join(lines) + "\n")
    board = load_board(ClassBoard, tmp_path / "class.jsonl")
    assert [r.name for r in board.snapshot().members] == ["ada"]


def test_a_hostile_name_in_the_first_right_lines_is_text_not_markup_or_escapes(tmp_path):
    import asyncio

    from sapo_edge.tui.class_view import ClassUpdated, ClassView
    from sapo_edge.tui.widgets.class_widgets import LearnedMatrix

    board = ClassBoard(tmp_path / "class.jsonl")
    board.record(ADA, stats(0, "[/]\x1b[31mred[b]", 0.5, 0.25))
    line = first_tagged_lines(board.snapshot().members)[0]
    assert "\x1b" not in line
    app = ClassView(None, start=False)

    async def look() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            app.post_message(ClassUpdated(board.snapshot(), "1 member · x"))
            await pilot.pause()
            shown = app.query_one(LearnedMatrix).query_one("Static").render()
            assert "[/]" in str(shown) and "\x1b" not in str(shown)

    asyncio.run(look())
