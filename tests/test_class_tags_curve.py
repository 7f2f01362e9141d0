"""The lesson's live curve (issue 57): the `tags` and `strict` columns say a member's last round
only and jump (75%, then 0%); the class view and the projector page draw the share of answers
inside the tags per round as the class's means (the members without the hint, the hinted
laptop, the solo baseline), from the rows the host vouches for only (a puppet's claims move
none of them), bounded for a class of 256 (the page gets three means, not 256 curves), redrawn
only when a curve moved; names stay text."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import replace

import pytest
from test_class_page import CHROME_FLAGS, CHROMIUM
from test_class_tags import stats
from test_class_taught import page_host  # noqa: F401 - a fixture

from sapo_edge.classroom.board import ClassBoard
from sapo_edge.swarm.progress import Progress
from sapo_edge.tui.class_view import ClassUpdated, ClassView
from sapo_edge.tui.widgets.tags_chart import TagsChart

TEACHER, ADA, BOB, SOLO, PUPPET, FAKE_SOLO = ("%032x" % (i + 1) for i in range(6))
EVIL = "[b]ev\x1b[31mil[/b] <img src=x onerror=alert(1)>"


def lesson(board: ClassBoard, rounds: int = 4, teacher: str = "teacher") -> ClassBoard:
    """The teacher (hinted) always in tags; ada 0, 0.5, 1, 1...; bob 0, 0, 0.5, 0.5...; the solo
    baseline 0.25 every round; a puppet nobody admitted or verified claims 1.0 as a member, and
    another 1.0 as a baseline."""
    board.hinted = lambda node_id: node_id == TEACHER
    for r in range(rounds):
        board.record(TEACHER, stats(r, teacher, tagged=1.0, strict=0.75))
        board.record(ADA, stats(r, "ada", tagged=min(1.0, r / 2), strict=0.0))
        board.record(BOB, stats(r, "bob", tagged=min(1.0, max(0, r - 1) / 2), strict=0.0))
        board.record(SOLO, replace(stats(r, "solo", 0.25, 0.0), role="baseline"))
        board.record(PUPPET, stats(r, "puppet", tagged=1.0, strict=1.0))
        board.record(FAKE_SOLO, replace(stats(r, "fake", 1.0, 1.0), role="baseline"))
    return board


def host_board(path=None) -> ClassBoard:
    """The host verified ada's and bob's groups and admitted the solo baseline."""
    board = ClassBoard(path, host_id=TEACHER, received=lambda: {ADA: 8, BOB: 8})
    board.admissions_known = True
    assert board.admit(SOLO, "192.168.1.40") == ""
    return board


def test_the_tags_curve_is_the_class_the_hint_and_the_baseline_and_puppets_move_none():
    board = lesson(host_board())
    snap = board.snapshot()
    assert snap.tags == {
        "class": [(1, 0.0), (2, 0.25), (3, 0.75), (4, 1.0)],  # ada and bob (not the hint)
        "hint": [(r, 1.0) for r in range(1, 5)],  # the teacher's laptop
        "baseline": [(r, 0.25) for r in range(1, 5)],  # the admitted baseline, not the fake
    }
    assert {m.name for m in snap.members} >= {"puppet", "fake"}  # their rows stay, as claims
    # the teacher gives the worked example to ada instead: the next snapshot draws it so, even
    # when only a progress message came in between (no round moved)
    board.hinted = lambda node_id: node_id == ADA
    board.record_progress(BOB, Progress("training", 4, 8, 1, 2, "bob", "m"))
    assert board.snapshot().tags["hint"] == [(1, 0.0), (2, 0.5), (3, 1.0), (4, 1.0)]
    # what the host vouches for moves with it: ada's groups no longer verified here
    board = lesson(ClassBoard(None, host_id=TEACHER, received=lambda: {BOB: 8}))
    board.admissions_known = True
    assert board.snapshot().tags["class"] == [(1, 0.0), (2, 0.0), (3, 0.5), (4, 1.0)]
    assert "baseline" not in board.snapshot().tags  # no baseline admitted


def test_the_pages_json_carries_three_means_not_each_members_curve():
    """A previous change left each member's tags_curve out of the page's JSON (256 curves every
    poll); the page draws the class's means instead: their size grows with the rounds, not with
    the class."""
    sizes = {}
    for members in (16, 256):
        ids = ["%032x" % (i + 1) for i in range(members)]
        board = ClassBoard(None, host_id=ids[0])
        for r in range(30):
            for k, me in enumerate(ids):
                board.record(me, stats(r, f"m{k}", tagged=(r + k % 4) / 40, strict=0.0))
        page = board.snapshot().to_json()
        assert all("tags_curve" not in m for m in page["members"])
        assert set(page["tags"]) == {"class"} and len(page["tags"]["class"]) == 30
        sizes[members] = len(json.dumps(page["tags"]))
    assert sizes[256] == sizes[16] < 1_000


def _plot_text(app: ClassView) -> str:
    return str(app.query_one("#tags-plot").render())


def test_the_class_view_draws_the_curve_and_redraws_it_only_when_a_curve_moved(tmp_path):
    board = lesson(host_board(), rounds=3, teacher=EVIL)
    app = ClassView(None, start=False)
    charted: list[int] = []

    async def drive() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            chart = app.query_one(TagsChart)
            assert not chart.display  # before any member said its tags
            plt = app.query_one("#tags-plot").plt
            real = plt.clear_figure
            plt.clear_figure = lambda *a, **kw: charted.append(1) or real(*a, **kw)

            async def redraw() -> None:
                app.post_message(ClassUpdated(board.snapshot(), "4 members · x"))
                await pilot.pause()

            await redraw()
            assert chart.display and len(charted) == 1
            text = _plot_text(app)
            assert "class" in text and "solo baseline" in text
            assert "[b]ev[31mil[/b]… (hint)" in text and "\x1b" not in text  # text, cut
            assert "puppet" not in text and "fake" not in text
            board.record_progress(ADA, Progress("training", 3, 8, 1, 2, "ada", "m"))
            await redraw()
            assert len(charted) == 1, "redrawn for a progress message"
            board.record(PUPPET, stats(3, "puppet", tagged=1.0, strict=1.0))
            await redraw()
            assert len(charted) == 1, "redrawn for a puppet's round"
            board.record(ADA, stats(3, "ada", tagged=1.0, strict=0.5))
            board.record(BOB, stats(3, "bob", tagged=1.0, strict=0.5))
            await redraw()
            assert len(charted) == 2  # the class's curve moved
            app.save_screenshot(str(tmp_path / "tags.svg"))
            await pilot.press("q")

    asyncio.run(drive())


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)")
def test_the_page_draws_the_curve_and_the_hinted_name_stays_text(page_host, tmp_path):  # noqa: F811
    board = page_host.board
    board.received = lambda: {ADA: 8, BOB: 8}
    board.host_id, board.admissions_known = TEACHER, True
    assert board.admit(SOLO, "127.0.0.1") == ""
    lesson(board, teacher=EVIL)
    common = [CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    url = f"http://127.0.0.1:{page_host.services.web_port}/"
    dom = subprocess.run(
        [*common, "--dump-dom", url], capture_output=True, text=True, timeout=90, check=False
    ).stdout
    box = dom[dom.index('<div id="tags-box"') :]
    box = box[: box.index("</div>", box.index('id="tags-legend"')) + 6]
    assert box.startswith('<div id="tags-box">')  # shown (not hidden)
    assert box.count("<polyline") == 3  # the class, the hint, the baseline; no puppet
    assert "<span><i" in box and ">class</span>" in box and ">solo baseline</span>" in box
    assert "[b]ev[31mil[/b] &lt;img sr… (hint)</span>" in box  # cleaned, cut, as text
    assert '<img src="x"' not in dom and 'onerror="' not in dom
