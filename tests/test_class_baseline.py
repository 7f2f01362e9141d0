"""A `join --baseline` laptop (issue 57): a teacher read "recv 8" on the solo baseline's line
though it trains on none of the class's groups. It still receives them (its pool keeps what
arrives, as any member's does), so what it shows says they went unused: its printed round line
and its dashboard; a member that trains on peers' groups reads as before."""

from __future__ import annotations

import asyncio
import dataclasses

from scripted import make_cfg, make_node

from sapo_edge.config.settings import Config
from sapo_edge.rl.metrics import PrintCallback
from sapo_edge.swarm.transport import InProcessHub
from sapo_edge.tui.app import SapoDashboard
from sapo_edge.tui.bridge import TuiCallback
from sapo_edge.tui.messages import RoundDone
from sapo_edge.tui.widgets.round_progress import RoundProgress


def _baseline(cfg: Config) -> Config:
    """What join_class makes of the class's settings for --baseline (J=0, shares nothing)."""
    return dataclasses.replace(
        cfg,
        local_samples=min(cfg.local_samples + cfg.external_samples, cfg.questions_per_round),
        external_samples=0,
        share="none",
    )


def test_a_baseline_says_what_it_received_went_unused(tmp_path):
    hub = InProcessHub()
    cfg = make_cfg(tmp_path)
    ada = make_node(cfg, "ada", hub.connect("id-ada"))
    solo = make_node(_baseline(make_cfg(tmp_path)), "solo", hub.connect("id-solo"))
    lines: list[str] = []
    sent: list = []
    tui = TuiCallback(sent.append)
    for node in (ada, solo):
        node.callback = PrintCallback(lines.append)
    ada.run_round()  # ada shares its groups with the class
    report = solo.run_round()
    assert report.received > 0 and report.external_used == 0  # it received, trained none
    assert f"| recv {report.received} unused (J=0) | train 2+0 groups" in lines[-1], lines[-1]
    ada_line = next(line for line in lines if "ada round" in line and "| recv" in line)
    assert "| recv 0 | train" in ada_line  # nothing arrived: no word about it
    solo.callback = tui
    solo.run_round()
    (done,) = [m for m in sent if isinstance(m, RoundDone)]
    assert done.external_none and done.external_target is None

    app = SapoDashboard(Config(), start=False)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            app.post_message(dataclasses.replace(done, received=8))
            await pilot.pause()
            speed = str(app.query_one(RoundProgress).query_one("#speed").render())
            assert "received 8, unused (J=0) · pool" in speed, speed
            app.post_message(dataclasses.replace(done, received=8, external_none=False))
            await pilot.pause()
            speed = str(app.query_one(RoundProgress).query_one("#speed").render())
            assert "received 8 · pool" in speed, speed

    asyncio.run(drive())


def test_a_member_that_trains_on_peers_reads_as_before(tmp_path):
    hub = InProcessHub()
    ada = make_node(make_cfg(tmp_path), "ada", hub.connect("id-ada"))
    bob = make_node(make_cfg(tmp_path), "bob", hub.connect("id-bob"))
    lines: list[str] = []
    bob.callback = PrintCallback(lines.append)
    ada.run_round()
    report = bob.run_round()
    assert report.received > 0 and report.external_target == 2
    assert f"| recv {report.received} | train" in lines[-1]
