"""What each member teaches (issue 57): the host keeps the groups of each member that its own
laptop trained on (made safe, bounded), `t` on a member's row shows them, and the report lists
per member the answers of theirs most trained on."""

from __future__ import annotations

import asyncio
import csv
import json
from types import SimpleNamespace

import pytest
import test_classroom
from scripted import Quiet
from test_class_page import CHROME_FLAGS, CHROMIUM
from test_class_remove import select_member
from test_classroom import linked, node_of, run_rounds_in_step, student

from sapo_edge.classroom import taught as taught_mod
from sapo_edge.classroom.taught import Taught, most_trained

host = test_classroom.host


@pytest.fixture
def page_host(tmp_path):
    from scripted import make_cfg

    from sapo_edge.classroom.host import ClassHost, HostOptions
    from sapo_edge.swarm.identity import Identity

    where = dict(address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web="127.0.0.1:0")
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False)
    h = ClassHost(cfg, HostOptions(**where), identity=Identity.generate(), log=lambda _m: None)
    h.start()
    yield h
    h.close()


def _g(origin: str, question: str, answers: list[str], rewards: list[float]):
    return SimpleNamespace(origin=origin, question=question, completions=answers, rewards=rewards)


def test_taught_keeps_peers_groups_safe_and_bounded(tmp_path) -> None:
    t = Taught(tmp_path / "taught.jsonl")
    evil = "[bold red]rm -rf[/] \x1b[2J\x1b]52;c;aGk=\x07 done"
    t.record(
        0, [_g("self", "mine", ["a"], [1.0]), _g("a" * 32, "2+2? \x1b[31m", [evil, "x"], [1, 0])]
    )
    got = t.of("a" * 32)
    assert len(got) == 1 and t.of("self") == []
    text = json.dumps(got)
    assert "\x1b" not in text and "\x07" not in text and "[bold red]" in text  # kept as text
    for r in range(1, 20):
        t.record(r, [_g("a" * 32, f"q{r}", ["y" * 5000], [1.0])])
    got = t.of("a" * 32)
    assert len(got) == taught_mod.KEPT and got[0]["question"] == "q19"  # the newest first
    assert len(got[0]["answers"][0][0]) <= taught_mod.ANSWER_CHARS
    best = most_trained(tmp_path / "taught.jsonl")
    assert best["a" * 32][0][1] == 19  # the same rewarded answer, trained on 19 times


def test_the_host_keeps_what_it_trained_on_and_t_shows_it_and_the_report_lists_it(
    host, tmp_path
) -> None:
    from sapo_edge.classroom.report import write_report
    from sapo_edge.tui.class_view import ClassView
    from sapo_edge.tui.screens.taught import TaughtScreen

    ada = student(host, tmp_path, "ada")
    host_node = node_of(host.cfg, host.transport, "teacher", host.member_callback(Quiet()))
    ada_node = node_of(ada.cfg, ada.transport, "ada", ada.callback(Quiet()))
    ada.transport.start()
    ada_id = ada.transport.ident.node_id
    try:
        linked(ada)
        run_rounds_in_step([host_node, ada_node], host, 3)
        kept = host.taught.of(ada_id)
        trained = sum(n for p, n in _external(host_node).items() if p == ada_id)
        assert kept and trained, (kept, trained)  # the host trained on ada's groups: kept
        app = ClassView(host, start=False)

        async def drive() -> None:
            async with app.run_test(size=(140, 40)) as pilot:
                await select_member(app, pilot, ada_id)
                await pilot.press("t")
                await pilot.pause()
                assert isinstance(app.screen, TaughtScreen)
                shown = str(app.screen.text)
                assert "What ada teaches" in shown and kept[0]["question"] in shown
                await pilot.press("escape")
                await pilot.pause()
                assert not isinstance(app.screen, TaughtScreen)

        asyncio.run(drive())
        write_report(host.out_dir, host.received_counts())
        rows = {r["node_id"]: r for r in csv.DictReader(open(host.out_dir / "class.csv"))}
        assert rows[ada_id]["most_trained_answer"], rows[ada_id]
        data = json.loads((host.out_dir / "class.json").read_text())
        ada_row = next(r for r in data["members"] if r["node_id"] == ada_id)
        assert ada_row["most_trained_answers"][0][1] >= 1
    finally:
        ada.transport.close()


def _external(node) -> dict[str, int]:
    """Producer -> groups the node trained on, over its rounds (its metrics file)."""
    out: dict[str, int] = {}
    path = node.out_dir / "metrics.jsonl"
    for line in path.read_text().splitlines():
        for p, n in json.loads(line).get("external_from", {}).items():
            out[p] = out.get(p, 0) + n
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)")
def test_the_page_shows_what_a_member_teaches_as_text(page_host, tmp_path) -> None:
    """/taught.json gives a member's groups (a node id only); the page draws them as text."""
    import subprocess
    import urllib.error
    import urllib.request

    host = page_host

    ada = "a" * 32
    assert host.board.admit(ada, "127.0.0.1") == ""
    from sapo_edge.swarm.progress import Progress

    host.board.record_progress(ada, Progress("training", 1, 8, name="ada"))
    evil = "<img src=x onerror=alert(1)> 4 \x1b[2J"
    host.taught.record(2, [_g(ada, "What is 2 + 2?", [evil, "5"], [1.0, 0.0])])
    base = f"http://127.0.0.1:{host.services.web_port}"
    got = json.loads(urllib.request.urlopen(f"{base}/taught.json?id={ada}", timeout=10).read())
    assert got["groups"][0]["question"] == "What is 2 + 2?" and "\x1b" not in json.dumps(got)
    for bad in ("x", "A" * 32, "a" * 31 + "/", ""):
        try:
            urllib.request.urlopen(f"{base}/taught.json?id={bad}", timeout=10)
            raise AssertionError(bad)
        except urllib.error.HTTPError as e:
            assert e.code == 400
    common = [CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*common, "--virtual-time-budget=5000", "--dump-dom", f"{base}/#taught={ada}"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    ).stdout
    assert "What ada teaches" in dom and "round 3 · What is 2 + 2?" in dom, dom[-3000:]
    assert "1.00  &lt;img src=x onerror=alert(1)&gt; 4" in dom and '<img src="x"' not in dom
