"""The class view: a pinned look (SVG snapshot at 120x40, fed a recorded class with a fixed
clock), and Pilot driving it on a real host (no training): the keys hide the code, make a new
one, write the report and end the class; members' names stay literal text.

After an intended change of the look: pytest tests/test_class_view.py --snapshot-update
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from class_recorded import CODE, HOSTILE, TASK, recorded_board
from scripted import make_cfg

from sapo_edge.classroom.code import qr_lines
from sapo_edge.classroom.host import ClassHost, HostOptions
from sapo_edge.swarm.identity import Identity
from sapo_edge.tui.class_view import ClassUpdated, ClassView, CodeShown, OwnStatus
from sapo_edge.tui.widgets.class_widgets import JoinPanel, LearnedMatrix, MembersTable

SIZE = (120, 40)
NETWORK = "3 peers connected (3 manual); relay up, 4 nodes heard in 5 min; listening on :7744"


async def feed(pilot) -> None:
    board = recorded_board()
    app = pilot.app
    app.post_message(CodeShown(CODE, qr_lines(CODE), "http://127.0.0.1:7746/"))
    app.post_message(ClassUpdated(board.snapshot(), f"5 members · {NETWORK}"))
    app.post_message(OwnStatus("round 9/20 · generating"))
    await pilot.pause()


def test_class_view_with_the_code(snap_compare) -> None:
    assert snap_compare(ClassView(None, start=False), terminal_size=SIZE, run_before=feed)


def test_class_view_with_the_code_hidden(snap_compare) -> None:
    async def hide(pilot) -> None:
        await feed(pilot)
        await pilot.press("j")
        await pilot.pause()

    assert snap_compare(ClassView(None, start=False), terminal_size=SIZE, run_before=hide)


@pytest.fixture
def host(tmp_path: Path):
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False)
    h = ClassHost(
        cfg,
        HostOptions(address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web="", train=False),
        identity=Identity.generate(),
        log=lambda _m: None,
    )
    h.start()
    recorded = recorded_board(h.out_dir / "class.jsonl")  # as if the class had run
    h.board.members, h.board.clock, h.board.host_id, h.board.seats = (
        recorded.members,
        recorded.clock,
        recorded.host_id,
        recorded.seats,
    )
    h.task = TASK
    yield h
    h.close()


def test_a_code_that_no_longer_admits_is_replaced_by_what_to_do(host) -> None:
    """Issue 28: the class view kept showing a code after it expired. Once the code admits
    nobody the panel and the header say so and how to get a new one (n), which shows at once."""
    app = ClassView(host, start=False)

    def small() -> str:
        return str(app.query_one(JoinPanel).query_one("#join-small").render())

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert "sapo-edge join " + host.code in small()
            clock = host.admissions.clock
            host.admissions.clock = lambda: clock() + 601 * 60  # past the code's minutes
            for _ in range(400):  # the view looks once a second (20 s bound)
                await asyncio.sleep(0.05)
                if "press n for a new one" in small():
                    break
            assert "press n for a new one" in small() and host.code not in small()
            header = str(app.query_one("#class-header").render())
            assert "none valid (n: a new one)" in header
            await pilot.press("n")
            await pilot.pause()
            assert "sapo-edge join " + host.code in small()
            assert "press n" not in small()
            await pilot.press("q")

    asyncio.run(drive())


def test_keys_drive_a_real_host(host) -> None:
    app = ClassView(host)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            table = app.query_one(MembersTable)
            names = [table.get_row_at(i)[0].plain for i in range(table.row_count)]
            assert names[:2] == ["teacher (host)", HOSTILE[:17] + "…"]  # literal, cut to fit
            assert (
                app.query_one(LearnedMatrix).row_count == 4
            )  # the solo baseline exchanges nothing
            panel = app.query_one(JoinPanel)
            assert panel.display and "sapo-edge join " + host.code in str(
                panel.query_one("#join-small").render()
            )
            await pilot.press("j")
            assert not panel.display
            old = host.code
            await pilot.press("n")
            await pilot.pause()
            assert host.code.split("-")[0] != old.split("-")[0]  # another number: the old
            assert old.split("-")[0] not in host.admissions.codes  # code reads as replaced
            await pilot.press("r")
            await asyncio.wait_for(app.workers.wait_for_complete(), 120)
            assert [p.name for p in app.report_paths] == [
                "class.csv",
                "class.json",
                "reward_curves.png",
                "learned_from.png",
            ]
            await pilot.press("q")
        assert app.return_value == "ended"

    asyncio.run(drive())
    assert (host.out_dir / "class.csv").read_text().count("\n") == 6  # header + 5 members


def test_a_report_that_fails_does_not_end_the_class(host, monkeypatch) -> None:
    """The r key writes the report on a worker thread: an unexpected error there (a plotting
    library's bug, a strange board) is shown, and the class view (and the class) goes on."""
    from sapo_edge.classroom import report

    def broken(*_a, **_k):
        raise RuntimeError("the plotting library broke")

    monkeypatch.setattr(report, "write_report", broken)
    app = ClassView(host)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press("r")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.is_running
            assert any("could not be written" in str(n.message) for n in app._notifications)
            await pilot.press("q")
        assert app.return_value == "ended"

    asyncio.run(drive())


def test_a_class_of_256_is_read_off_the_ui_thread_and_redrawn_only_on_change(host) -> None:
    """Issue 31 #3: the board is read on a worker thread (the keys never wait on it), the
    learned-from table is bounded, and a refresh with nothing new redraws nothing."""
    import threading

    from test_class_board import big_board

    from sapo_edge.classroom.board import MATRIX_MEMBERS

    board, _ids = big_board()
    board.host_id = host.board.host_id
    host.board = board
    readers: list[threading.Thread] = []
    snapshot = board.snapshot

    def counted(*a, **kw):
        readers.append(threading.current_thread())
        return snapshot(*a, **kw)

    board.snapshot = counted
    app, updates = ClassView(host, start=False), []

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            ui = threading.current_thread()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.query_one(MembersTable).row_count == 256
            assert app.query_one(LearnedMatrix).row_count <= MATRIX_MEMBERS
            app.on_class_updated = lambda m: updates.append(m)  # count what is posted now
            for _ in range(3):
                app.refresh_board()
                await app.workers.wait_for_complete()
            await pilot.pause()
            assert readers and all(t is not ui for t in readers)
            await pilot.press("q")

    asyncio.run(drive())
    assert updates == []  # nothing changed: nothing posted, nothing redrawn


def test_names_are_whole_where_the_terminal_has_room() -> None:
    """Issue 28: the host's row read 'mellow-quo… (host)' in 140 columns. Names are cut only
    where the terminal is narrow (120: 18 characters); the table fits the terminal."""
    from sapo_edge.classroom.board import ClassBoard
    from sapo_edge.swarm.stats import RoundStats

    host_id = "1" * 32
    board = ClassBoard(host_id=host_id)
    board.record(
        host_id, RoundStats(0, 0.5, 1, 1, 0, 0, {}, "mrs-bennett-chemistry", "m", "t", "c")
    )
    seen = {}
    for width in (120, 140):
        app = ClassView(None, start=False)

        async def look(app=app, width=width) -> None:
            async with app.run_test(size=(width, 40)) as pilot:
                app.post_message(ClassUpdated(board.snapshot(), "1 member · x"))
                await pilot.pause()
                table = app.query_one(MembersTable)
                seen[width] = table.get_row_at(0)[0].plain
                assert table.virtual_size.width <= table.size.width

        asyncio.run(look())
    assert seen == {120: "mrs-bennet… (host)", 140: "mrs-bennett-chemistry (host)"}


def test_every_key_that_acts_says_so_in_one_line(host) -> None:
    """Issue 28: s and r left nothing on screen. Every key that acts confirms in one line,
    also when there is nothing for it to do (this laptop not training)."""
    app = ClassView(host)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            for key, words in (("s", "nothing to save"), ("p", "not training"), ("r", "report")):
                before = len(app._notifications)
                await pilot.press(key)
                await pilot.pause()
                new = [str(n.message) for n in list(app._notifications)[before:]]
                assert any(words in text for text in new), (key, new)
            await app.workers.wait_for_complete()
            await pilot.press("q")

    asyncio.run(drive())


def test_a_member_gone_quiet_reads_as_such() -> None:
    """A member's state is its last word: once it has said nothing for a minute (its laptop
    sleeps, its network went), its row says so rather than 'generating' forever. Issue 48:
    states by their names: one that left (q) or whose rounds are done says so for good (it
    read 'round 15 · saving', then 'quiet'); one paused (p) says 'paused'."""
    from sapo_edge.classroom.board import ClassBoard
    from sapo_edge.swarm.progress import Progress

    now = [1000.0]
    board = ClassBoard(clock=lambda: now[0])
    ada, bob, cy, dee = (f"{i:032x}" for i in range(2, 6))
    board.record_progress(ada, Progress("generating", 2, 9, 1, 4, "ada", "m", "t", "c"))
    board.record_progress(bob, Progress("stopped", 14, 20, name="bob"))
    board.record_progress(cy, Progress("done", 8, 8, name="cy"))
    board.record_progress(dee, Progress("paused", 10, 20, name="dee"))
    shown = []
    for later in (30.0, 75.0):
        now[0] = 1000.0 + later
        app = ClassView(None, start=False)

        async def look(app=app) -> None:
            async with app.run_test(size=SIZE) as pilot:
                app.post_message(ClassUpdated(board.snapshot(), "4 members · x"))
                await pilot.pause()
                table = app.query_one(MembersTable)
                shown.append({table.get_row_at(i)[0].plain: table.get_row_at(i)[1].plain
                              for i in range(4)})  # fmt: skip

        asyncio.run(look())
    assert shown[0] == {
        "ada": "round 3 · generating 25%",
        "bob": "left",
        "cy": "done after 8 rounds",
        "dee": "paused (round 11 next)",
    }
    assert shown[1] == {
        "ada": "asleep? not heard for 75s",
        "bob": "left",
        "cy": "done after 8 rounds",
        "dee": "asleep? not heard for 75s",
    }


def test_names_cut_to_fit_keep_their_distinguishing_end() -> None:
    """Issue 48: 'swift-badger-6aea' and 'swift-badger-f3ab' showed as 'swift-bad…' and
    'swift-…' twice in the learned-from table: cut names keep what tells them apart."""
    from sapo_edge.classroom.board import ClassBoard
    from sapo_edge.data.textsafe import short_name
    from sapo_edge.swarm.stats import RoundStats

    assert short_name("swift-badger-6aea", 7) == "sw…6aea"
    assert short_name("swift-badger-6aea", 10) == "swift…6aea"
    assert short_name("ada#3f2a1b", 8) == "a…3f2a1b"
    assert short_name("ada", 7) == "ada" and short_name("abcdefghij", 7) == "abcdef…"
    assert short_name("mrs-bennett-chemistry", 11) == "mrs-bennet…"  # a word, not an id
    board = ClassBoard()
    ids = {"1" * 32: "swift-badger-ann", "2" * 32: "swift-badger-bob"}
    for me, name in ids.items():
        other = next(k for k in ids if k != me)
        board.record(me, RoundStats(0, 0.2, 2, 1, 1, 0, {other: (1, 1)}, name, "m", "t", "cpu"))
    app = ClassView(None, start=False)

    async def look() -> None:
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(ClassUpdated(board.snapshot(), "2 members · x"))
            await pilot.pause()
            head, *rows = app.query_one(LearnedMatrix)._shown.plain.split("\n")
            assert head.split()[-2:] in (["swi…ann", "swi…bob"], ["swi…bob", "swi…ann"])
            assert sorted(r.split()[0] for r in rows) == ["swift-…ann", "swift-…bob"]

    asyncio.run(look())


def test_every_key_of_the_footer_is_there_and_j_says_what_it_did() -> None:
    """Issue 48: `s` (save this laptop's run) was missing from the footer; `j` hid the code
    without its one line."""
    app = ClassView(None, start=False)

    async def look() -> None:
        async with app.run_test(size=SIZE) as pilot:
            shown = {b.key for b in app.BINDINGS if b.show}
            assert {"j", "n", "r", "s", "p", "l", "q"} <= shown
            await pilot.press("j")
            await pilot.pause()
            said = [n.message for n in app._notifications]
            assert said == ["join code hidden (j shows it; still valid)"]

    asyncio.run(look())


def test_a_redraw_of_256_members_redraws_only_what_changed() -> None:
    """Issue 44 #7: every redraw cleared the members table and added 256 rows again (each cell
    measured), rebuilt the learned-from table and the chart: 0.12-0.93 s of the UI thread. Now
    a member's new round updates that member's cells, everyone's progress their "doing"
    cells, and the chart is drawn again only when a curve moved (bench/class_view_redraw.py
    times it)."""
    from test_class_board import big_board, stats

    from sapo_edge.swarm.progress import Progress
    from sapo_edge.tui.widgets.class_widgets import ClassChart

    board, ids = big_board()
    now = [2_000_000_000.0]
    board.clock = lambda: now[0]
    app = ClassView(None, start=False)
    cleared, charted = [], []

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one(MembersTable)
            real_clear = table.clear
            table.clear = lambda *a, **kw: cleared.append(1) or real_clear(*a, **kw)
            plt = app.query_one(ClassChart).query_one("#class-plot").plt
            real_clear_figure = plt.clear_figure
            plt.clear_figure = lambda *a, **kw: charted.append(1) or real_clear_figure(*a, **kw)

            async def redraw() -> None:
                app.post_message(ClassUpdated(board.snapshot(), "256 members · x"))
                await pilot.pause()

            await redraw()
            assert table.row_count == 256 and len(cleared) == 1 and len(charted) == 1
            board.record(ids[7], stats(8, "m7", trained_external=0))
            await redraw()
            row = table.get_row(ids[7])
            assert str(row[2]) == "9"  # its rounds, in place (no backend column at this width)
            now[0] += 1
            for i, me in enumerate(ids):
                board.record_progress(me, Progress("training", 9, 20, 1, 2, f"m{i}", "m"))
            await redraw()
            assert {str(table.get_row(k)[1]) for k in ids} == {"round 10 · training 50%"}
            now[0] += 3600  # every "seen" and "doing" cell changes
            await redraw()
            asleep = {str(table.get_row(k)[1]) for k in ids if k != board.host_id}
            assert asleep == {"asleep? not heard for 60m"}  # the host's own row: this process
            del board.members[ids[9]]  # one leaves the board, one joins between others
            board.record("f" * 32, stats(0, "newcomer"))
            await redraw()
            shown = [str(table.get_row_at(i)[0]).removesuffix(" (host)") for i in range(256)]
            assert shown == [m.name for m in board.snapshot().members]
            assert "newcomer" in shown and "m9" not in shown
            assert table.row_count == 256
            assert len(cleared) == 1, "the members table was rebuilt"
            assert len(charted) == 2, "the chart was drawn again for progress alone"
            await pilot.press("q")

    asyncio.run(drive())


def test_a_students_peers_table_keeps_names_apart_too() -> None:
    from sapo_edge.config.settings import Config
    from sapo_edge.swarm.peers import PeerInfo
    from sapo_edge.tui.app import SapoDashboard
    from sapo_edge.tui.messages import PeersUpdated
    from sapo_edge.tui.widgets.tables import PeersTable

    app = SapoDashboard(Config(), start=False)
    peers = [
        PeerInfo(f"{i}" * 32, name=f"swift-badger-{tail}") for i, tail in ((1, "6aea"), (2, "f3ab"))
    ]

    async def look() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            app.post_message(PeersUpdated(peers, 0.0, "transport"))
            await pilot.pause()
            table = app.query_one(PeersTable)
            assert [table.get_row_at(i)[0].plain for i in range(2)] == [
                "swift-b…6aea",
                "swift-b…f3ab",
            ]

    asyncio.run(look())
