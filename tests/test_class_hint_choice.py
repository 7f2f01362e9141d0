"""The teacher chooses who holds the worked example (issue 54 #4: two scripted admissions took
both hints; the teacher could do nothing about it): `hint NAME` / `unhint NAME` (h in the class
view, a headless host's standard input) reach the member as the host's signed word, whose next
round is sampled and trained with the example on or off; newcomers no longer get it by coming
first; a classmate's forged word is not heeded."""

from __future__ import annotations

import json

import pytest
import test_classroom
from scripted import Quiet
from test_class_hint import _hinting_host, _invite
from test_classroom import linked, node_of, student

from sapo_edge.classroom.hint import Hints, HintWord
from sapo_edge.classroom.removal import Repeater, teacher_line
from sapo_edge.config.settings import Config
from sapo_edge.rl.prompts import build_messages
from sapo_edge.swarm.progress import Progress

host = test_classroom.host
EXAMPLE = build_messages("q", example=True)[1]["content"]  # the worked exchange's question


def _shows_example(backend) -> bool:
    prompts = backend.calls[-1]["prompts"]
    return all(any(m["content"] == EXAMPLE for m in p) for p in prompts)


def _example(text: str) -> bool:
    from sapo_edge.classroom.settings import read_invite

    return read_invite(text).settings["format_example"]


def test_once_the_teacher_chooses_only_its_choices_give_the_example() -> None:
    h = Hints(Config(hint="2"), _invite)
    assert _example(h.extra_for("a" * 32))  # the first comes first, as before
    assert h.choose("b" * 32, True, 10.0) and h.choose("a" * 32, False, 11.0)
    assert not h.choose("b" * 32, True, 12.0)  # no change: nothing to tell
    assert not _example(h.extra_for("c" * 32))  # a newcomer: no slot by coming first
    assert _example(h.extra_for("b" * 32)) and not _example(h.extra_for("a" * 32))  # rejoining
    assert sorted(h.words()) == [(10.0, "b" * 32, "hinted"), (11.0, "a" * 32, "unhinted")]
    assert not h.choose("d" * 32, False, 13.0) and len(h.words()) == 2  # no change: no word


def test_a_student_applies_the_newest_word_at_a_round_s_start_only() -> None:
    class N:
        cfg = Config(format_example=False)

        def configure(self, changes):  # as trainer.Node: its settings (and config.json)
            self.cfg = Config(**{**self.cfg.to_dict(), **changes})

    word, node = HintWord(), N()
    assert word.heard(True, 5.0) and not word.heard(False, 4.0)  # an older word loses
    word.apply(node)
    assert node.cfg.format_example is True


def test_the_teacher_gives_and_takes_the_example_and_the_students_rounds_follow(
    tmp_path,
) -> None:
    h = _hinting_host(tmp_path, "1")
    joined = []
    try:
        ada, bob = student(h, tmp_path, "ada"), student(h, tmp_path, "bob")
        joined += [ada, bob]
        assert ada.cfg.format_example and not bob.cfg.format_example  # the first came first
        nodes = {
            j.cfg.name: node_of(j.cfg, j.transport, j.cfg.name, j.callback(Quiet()))
            for j in (ada, bob)
        }
        for j in (ada, bob):
            j.transport.start()
            linked(j)
            h.board.record_progress(j.transport.ident.node_id, Progress("loading", name=j.cfg.name))

        # bob forges the host's word for itself: not heeded (not the host's signature)
        bob_id, ada_id = bob.transport.ident.node_id, ada.transport.ident.node_id
        bob.transport.stats.announce(Progress("hinted", name="bob", member=ada_id))
        code = h.new_code()  # a later word of the host's: bob's has arrived by then
        assert ada.transport.wait_for(lambda: ada.code_in_force == code, 10)
        assert ada.hint_word.on is None

        said = teacher_line(h, "hint bob")
        assert said.startswith("bob sees the worked example from its next round")
        said = teacher_line(h, "unhint ada")
        assert said.startswith("ada no longer sees the worked example")
        assert teacher_line(h, "unhint ada") == "ada does not see the worked example"
        assert bob.transport.wait_for(lambda: bob.hint_word.on is True, 10)
        assert ada.transport.wait_for(lambda: ada.hint_word.on is False, 10)
        for name in ("ada", "bob"):
            nodes[name].run_round()
        assert _shows_example(nodes["bob"].backend) and not _shows_example(nodes["ada"].backend)
        assert nodes["bob"].cfg.format_example and not nodes["ada"].cfg.format_example

        rows = {r.name: r for r in h.board.snapshot().members}
        assert rows["bob"].hinted and not rows["ada"].hinted
        cy = student(h, tmp_path, "cy")  # after the teacher chose: no example by coming
        joined.append(cy)
        assert not cy.cfg.format_example
        again = student(h, tmp_path / "again", "bob", bob.transport.ident)  # bob rejoins
        joined.append(again)
        assert again.cfg.format_example

        lines = [json.loads(x) for x in (h.out_dir / "class.jsonl").read_text().splitlines()]
        assert {"hinted": bob_id} in [{k: v for k, v in x.items() if k != "at"} for x in lines]
        from sapo_edge.classroom.report import load_class

        snap, _info = load_class(h.out_dir)
        assert bob_id in {m.node_id for m in snap.members}
    finally:
        for j in joined:
            j.transport.close()
        h.close()


def test_the_teacher_s_words_are_said_again_removals_first(tmp_path) -> None:
    """A newcomer learns of a removal only from these repeats: a teacher's many hint choices
    must not crowd it out (the review's scenario: one removal, then 12 hint words)."""
    import time
    from types import SimpleNamespace

    from sapo_edge.classroom.host import ClassHost
    from sapo_edge.classroom.removal import REPEATED

    removals = SimpleNamespace(words=lambda: [(1.0, "a" * 32, "removed")])
    hints = SimpleNamespace(words=lambda: [(2.0 + k, f"{k:032x}", "hinted") for k in range(12)])
    words = ClassHost.words(SimpleNamespace(removals=removals, hints=hints))
    assert len(words) == REPEATED and words[0] == (1.0, "a" * 32, "removed")
    assert [w[0] for w in words[1:]] == [7.0 + k for k in range(REPEATED - 1)]  # newest hints

    said: list[tuple[str, str]] = []
    r = Repeater(lambda: words, lambda node_id, phase: said.append((node_id, phase)), every=0.05)
    try:
        deadline = time.monotonic() + 10
        while len(said) < REPEATED and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        r.stop()
    assert said[:REPEATED] == [(n, p) for _at, n, p in words]  # in the host's order


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("hint teacher", "whether it sees the worked example is --hint's"),
        ("hint nobody", "no member is called 'nobody'"),
        ("hint", "type remove NAME"),
    ],
)
def test_a_wrong_hint_line_says_what_to_type(tmp_path, line, error) -> None:
    h = _hinting_host(tmp_path, "1")
    try:
        h.board.record_progress(h.board.host_id, Progress("loading", name="teacher"))
        with pytest.raises(ValueError, match=error):
            teacher_line(h, line)
    finally:
        h.close()


def test_without_a_hint_the_teacher_is_told_how_to_start_one(host, tmp_path) -> None:
    ada = student(host, tmp_path, "ada")
    try:
        host.board.record_progress(ada.transport.ident.node_id, Progress("loading", name="ada"))
        with pytest.raises(ValueError, match="start the class with --hint") as told:
            teacher_line(host, "hint ada")
        suggested = str(told.value).split("--hint ")[-1].split(")")[0]
        assert Config(hint=suggested).hint == suggested  # the fix works as typed
    finally:
        ada.transport.close()


def test_h_in_the_class_view_gives_the_selected_member_the_example_and_takes_it_back(
    tmp_path,
) -> None:
    import asyncio

    from test_class_remove import select_member
    from textual.widgets import Input

    from sapo_edge.tui.class_view import ClassView
    from sapo_edge.tui.screens.remove import HintScreen

    h = _hinting_host(tmp_path, "host")  # no student slot: only the teacher's choice gives one
    ada = student(h, tmp_path, "ada")
    ada_id = ada.transport.ident.node_id
    h.board.record_progress(ada_id, Progress("loading", name="ada"))
    app = ClassView(h, start=False)

    async def drive() -> None:
        async with app.run_test(size=(140, 40)) as pilot:
            await select_member(app, pilot, ada_id)
            await pilot.press("h")
            await pilot.pause()
            assert isinstance(app.screen, HintScreen)
            assert app.screen.query_one(Input).value == "ada"  # the selected row's name
            await pilot.press("enter")
            await pilot.pause()
            assert h.hints.hinted(ada_id, h.board.host_id)
            await pilot.press("h")  # again on a holder: the box offers to take it back
            await pilot.pause()
            assert app.screen.query_one(Input).value == "unhint ada"
            await pilot.press("enter")
            await pilot.pause()
            assert not h.hints.hinted(ada_id, h.board.host_id)

    try:
        asyncio.run(drive())
    finally:
        ada.transport.close()
        h.close()


def test_a_host_word_from_before_the_welcome_is_not_heeded(tmp_path) -> None:
    """The review's replay: the teacher hinted X, then took it back; X restarted and rejoined
    (its welcome: no example); a classmate replays the captured 'hinted X' (still within the
    signature's age limit): X must not turn the example on. The welcome carries the host's
    clock, and words signed before it are not heeded (in force, the host says them again)."""
    h = _hinting_host(tmp_path, "1")
    try:
        ada = student(h, tmp_path, "ada")
        try:
            since = ada.invite.said_at
            assert since > 0 and ada.hint_word.at == since and ada.removals.since == since
            assert not ada.hint_word.heard(True, since - 5)  # replayed: older than the welcome
            assert ada.hint_word.on is None
            me = ada.transport.ident.node_id
            assert not ada.removals.heard("b" * 32, True, since - 5) and me not in ada.removals
            assert ada.hint_word.heard(True, since + 1)  # the host's word after it counts
        finally:
            ada.transport.close()
    finally:
        h.close()
