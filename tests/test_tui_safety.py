"""Hostile text on the dashboard: markup (`[/]`, `[/b]`) and terminal escapes (ESC, CSI, OSC 52
clipboard writes, bidi overrides) in a peer's name, a model name, a completion, a question and a
log line. The Pilot-driven dashboard stays up, shows the text literally, and no control character
reaches what it renders. The peer's name arrives over a real loopback handshake."""

from __future__ import annotations

import asyncio

from swarm_util import net

from sapo_edge.config.settings import Config
from sapo_edge.data.textsafe import clean
from sapo_edge.swarm.peers import PeerInfo
from sapo_edge.tui.app import SapoDashboard
from sapo_edge.tui.messages import (
    LogLine,
    NodeStarted,
    Notice,
    PeersUpdated,
    Problem,
    Rollout,
    RolloutsSeen,
)
from sapo_edge.tui.widgets.header import NodeHeader
from sapo_edge.tui.widgets.problem import ProblemBanner
from sapo_edge.tui.widgets.rollouts import RolloutFeed
from sapo_edge.tui.widgets.tables import PeersTable

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # "write 'rm -rf ~' to the clipboard"
EVIL = f"[/]x[/b]{OSC52}\x1b[2J\u202e[bold red]y"


def test_clean_removes_control_and_format_characters() -> None:
    assert clean(EVIL) == "[/]x[/b]]52;c;cm0gLXJmIH4=[2J[bold red]y"
    assert clean("a\tb\nc\u2028d") == "a b c d"
    assert clean("a\nb", keep_newlines=True) == "a\nb"
    assert clean("\ud800x") == "x"  # a lone surrogate
    assert clean("naïve 漢字 🙂 café") == "naïve 漢字 🙂 café"  # ordinary text untouched
    assert clean("x" * 50, 10) == "x" * 9 + "…"


def _has_control(text: str) -> bool:
    return any(c != "\n" and clean(c, keep_newlines=True) != c for c in text)


def test_markup_and_escapes_from_peers_and_models_never_reach_the_terminal() -> None:
    # a real peer announces a name full of markup over the handshake (control characters are
    # refused by the protocol itself); its row goes to the table like any other
    a = net()
    b = net(name="[/b]anna[/]", peers=[f"127.0.0.1:{a.port}"], model="[/]tiny")
    try:
        assert a.wait_for(lambda: len(a.connected()) == 1, 5)
        rows = a.peers()
    finally:
        a.close()
        b.close()
    assert rows[0].name == "[/b]anna[/]" and rows[0].model == "[/]tiny"
    rows.append(PeerInfo(node_id="ab" * 16, name=EVIL, model=EVIL, backend=EVIL))
    app = SapoDashboard(Config(), start=False)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            for m in (
                NodeStarted(EVIL, "id", EVIL, EVIL, "torch", "cpu", "f32", EVIL, 1, 1.0, 3, 1, 1),
                PeersUpdated(rows, 0.0, "transport"),
                RolloutsSeen([Rollout(1, "d", EVIL, f"<answer>{EVIL}</answer>", 1.0, EVIL)]),
                LogLine(f"node: peer {EVIL} said {EVIL}"),
                Notice(f"room {EVIL}"),  # a notification
                Problem(EVIL, EVIL, fatal=False, detail=EVIL),
            ):
                app.post_message(m)
            await pilot.pause()
            await pilot.press("l")  # open the log pane: it renders the lines too
            await pilot.pause()
            assert app.is_running and app.return_value is None  # still up
            table = app.query_one(PeersTable)
            cells = [str(c) for i in range(table.row_count) for c in table.get_row_at(i)]
            assert any("[/b]anna[/]" in c for c in cells) and any("[/]x[/b]" in c for c in cells)
            feed = app.query_one(RolloutFeed)
            row = [str(c) for c in feed.get_row_at(0)]
            assert any("[/]x[/b]" in c for c in row)
            header = str(app.query_one(NodeHeader).render())
            banner = str(app.query_one(ProblemBanner).render())
            for text in cells + row + [header, banner]:
                assert not _has_control(text), repr(text)
            screen = app.export_screenshot()
            assert "\x1b]52" not in screen and "\x07" not in screen and "\u202e" not in screen

    asyncio.run(drive())
