"""`host --hint` (issue 45's lesson): the teacher's laptop and/or the first K students see the
worked example, the others never do; each student's welcome carries its own format_example."""

from __future__ import annotations

import pytest

from sapo_edge.classroom.hint import Hints
from sapo_edge.classroom.settings import make_invite, read_invite
from sapo_edge.config.settings import Config, ConfigError
from sapo_edge.swarm.admission import Admissions, Grant, join_room
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.roomkey import new_room_key


def _invite(example: bool) -> str:
    """The class's settings as a student's welcome carries them, the example on or off."""
    return make_invite(Config(format_example=example), 7744, 7745, "teacher").to_text()


def _hints(hint: str) -> Hints:
    return Hints(Config(hint=hint), _invite)


@pytest.mark.parametrize(
    ("hint", "host", "students"), [("host", True, 0), ("2", False, 2), ("host,1", True, 1)]
)
def test_the_hint_names_the_host_and_or_the_first_students(hint, host, students):
    h = _hints(hint)
    assert (h.host, h.students) == (host, students)
    assert h.host_config(Config(hint=hint)).format_example is host
    got = [read_invite(h.extra_for(f"{k:032x}")).settings["format_example"] for k in range(4)]
    assert got == [True] * students + [False] * (4 - students)
    again = read_invite(h.extra_for(f"{0:032x}")).settings["format_example"]
    assert again is (students > 0)  # a student who joins again keeps what it was given
    assert not read_invite(h.extra_for(None)).settings["format_example"]  # said nothing: none


def test_no_hint_leaves_format_example_to_the_class():
    cfg = Config(format_example=True)
    h = Hints(cfg, lambda _ex: make_invite(cfg, 1, 2, "t").to_text())
    assert not h.active and h.host_config(cfg) is cfg and h.class_config(cfg) is cfg
    assert read_invite(h.extra_for("a" * 32)).settings["format_example"] is True


@pytest.mark.parametrize("bad", ["hosts", "1,2", "host,host", "-1", "host;2"])
def test_a_bad_hint_is_refused_with_the_fix(bad):
    with pytest.raises(ConfigError, match="write host, a number of students"):
        Config(hint=bad)


def test_the_hint_is_never_sent_to_a_student():
    settings = make_invite(Config(hint="host,2", hinted_nodes=[0]), 1, 2, "t").settings
    assert not {"hint", "hinted_nodes", "hint_rounds"} & set(settings)


def test_each_newcomer_s_welcome_carries_its_own_hint(nodes):
    """Over the real admission: the first student to say who it is gets the example, the next
    does not; both get the same room."""
    key = new_room_key()
    hints = _hints("1")
    adm = Admissions(Grant("lab", key, relay="", extra=hints.invite(False)))
    adm.extra_for = hints.extra_for
    node = nodes(room="lab", secret=key, admissions=adm)
    code = adm.new_code()
    first, second = Identity.generate(), Identity.generate()
    a = join_room(f"127.0.0.1:{node.port}", code, who=(first, "ada"))
    b = join_room(f"127.0.0.1:{node.port}", code, who=(second, "bob"))
    assert a.secret == b.secret == key
    assert read_invite(a.extra).settings["format_example"] is True
    assert read_invite(b.extra).settings["format_example"] is False
    assert hints.given == [first.node_id]


def test_a_host_with_a_hint_gives_it_to_whom_it_names(tmp_path):
    """A real ClassHost: `--hint 1` gives the first student to join the example (its settings
    say so), the second never, the teacher's own node neither; the board marks the hinted
    row; the class's saved settings are the students' without the example."""
    import json

    from test_classroom import student

    from sapo_edge.classroom.host import INFO_FILE
    from sapo_edge.swarm.progress import Progress

    h = _hinting_host(tmp_path, "1")
    try:
        ada = student(h, tmp_path, "ada")
        bob = student(h, tmp_path, "bob")
        assert ada.cfg.format_example is True and bob.cfg.format_example is False
        assert h.hints.host_config(h.cfg).format_example is False
        assert h.hints.given == [ada.transport.ident.node_id]
        for j in (ada, bob):  # rows from their progress, as a student's node would send
            h.board.record_progress(j.transport.ident.node_id, Progress("loading", name=j.cfg.name))
        rows = {r.name: r for r in h.board.snapshot().members}
        assert rows["ada"].hinted and not rows["bob"].hinted
        info = json.loads((tmp_path / "host" / INFO_FILE).read_text())
        assert info["hint"] == "1" and info["settings"]["format_example"] is False
    finally:
        h.close()


def test_the_teacher_s_hint_is_its_own_only(tmp_path):
    from test_classroom import student

    h = _hinting_host(tmp_path, "host")
    try:
        assert h.hints.host_config(h.cfg).format_example is True
        assert student(h, tmp_path, "ada").cfg.format_example is False
        assert "this laptop" in h.hints.describe()
    finally:
        h.close()


def _hinting_host(tmp_path, hint: str):
    from scripted import make_cfg
    from test_classroom import fast

    from sapo_edge.classroom.host import ClassHost, HostOptions

    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False, rounds=10, hint=hint)
    opts = HostOptions(address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web="")
    h = ClassHost(cfg, opts, identity=Identity.generate(), log=lambda _m: None).start()
    fast(h.transport)
    return h


def test_a_hint_slot_held_by_no_work_goes_to_the_next_student():
    """Issue 54 #4: two scripted admissions right after the code appeared took both worked
    examples, and the slots never came back. A holder whose groups the host has not verified
    ACTED_GRACE_S after it was given the example gives its slot to the next newcomer; one that
    trains keeps its own."""
    from sapo_edge.classroom.board_seats import ACTED_GRACE_S

    now, working = [0.0], set()
    h = Hints(Config(hint="2"), _invite, working=lambda k: k in working, clock=lambda: now[0])
    example = lambda text: read_invite(text).settings["format_example"]  # noqa: E731
    assert example(h.extra_for("puppet-1")) and example(h.extra_for("student-1"))
    assert not example(h.extra_for("student-2"))  # both slots held, not yet idle
    working.add("student-1")  # its groups arrive; the puppet's never do
    now[0] = ACTED_GRACE_S + 1
    assert example(h.extra_for("student-3"))  # the puppet's slot
    assert h.given == ["student-1", "student-3"]
    assert not h.hinted("puppet-1", "host") and h.hinted("student-1", "host")
    assert not example(h.extra_for("student-4"))  # student-3 has its grace; student-1 works


def test_the_page_says_what_the_lesson_shows():
    """Issue 57: the page's subtitle ("basic_arithmetic · 4 questions x G=4 ...") meant nothing
    to a student: with a hint, one sentence says what the lesson shows and what the tags are."""
    said = Hints(Config(hint="host,2"), _invite).lesson()
    assert said.startswith("This lesson: the teacher's laptop and 2 students see a worked example")
    assert "<answer>...</answer>" in said
    assert Hints(Config(hint=""), _invite).lesson() == ""
    alone = Hints(Config(hint="host"), _invite)  # seen in a lesson: "the teacher's laptop see"
    assert alone.lesson().startswith("This lesson: the teacher's laptop sees a worked example")
    alone.choose("b" * 32, True, 1.0)  # the teacher gave a student the example: said so
    assert alone.lesson().startswith("This lesson: the teacher's laptop and 1 student see")
