"""Pinned looks of the dashboard at 120x40: the main screen, the help screen, a first round in
generation and a round that trained nothing, fed recorded messages (no training) with a fixed
clock, so the SVG snapshots in __snapshots__/ are stable.

After an intended change of the look: pytest tests/test_tui_snapshots.py --snapshot-update
"""

import sys
from pathlib import Path

from sapo_edge.config.settings import Config
from sapo_edge.tui.app import SapoDashboard
from sapo_edge.tui.widgets.round_progress import RoundProgress

sys.path.insert(0, str(Path(__file__).parent))
from tui_recorded import T0, first_round_messages, idle_round_messages, recorded_messages  # noqa: E402

SIZE = (120, 40)


def feeder(messages, now: float):
    async def feed(pilot) -> None:
        pilot.app.query_one(RoundProgress).clock = lambda: now  # ETAs do not follow the clock
        for m in messages:
            pilot.app.post_message(m)
        await pilot.pause()

    return feed


feed = feeder(recorded_messages(), T0 + 12 * 30.0 + 16.0)


def test_main_screen(snap_compare):
    assert snap_compare(SapoDashboard(Config(), start=False), terminal_size=SIZE, run_before=feed)


def test_help_screen(snap_compare):
    async def feed_then_help(pilot) -> None:
        await feed(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(
        SapoDashboard(Config(), start=False), terminal_size=SIZE, run_before=feed_then_help
    )


def test_first_round_generating(snap_compare):
    run_before = feeder(first_round_messages(), T0 + 40.0)
    assert snap_compare(
        SapoDashboard(Config(), start=False), terminal_size=SIZE, run_before=run_before
    )


def test_round_that_trained_nothing(snap_compare):
    run_before = feeder(idle_round_messages(), T0 + 212.0)
    assert snap_compare(
        SapoDashboard(Config(), start=False), terminal_size=SIZE, run_before=run_before
    )
