"""Pinned looks of the dashboard at 120x40: the main screen and the help screen, fed recorded
messages (no training), so the SVG snapshots in __snapshots__/ are stable.

After an intended change of the look: pytest tests/test_tui_snapshots.py --snapshot-update
"""

import sys
from pathlib import Path

from sapo_edge.config import Config
from sapo_edge.tui.app import SapoDashboard

sys.path.insert(0, str(Path(__file__).parent))
from tui_recorded import recorded_messages  # noqa: E402

SIZE = (120, 40)


async def feed(pilot) -> None:
    for m in recorded_messages():
        pilot.app.post_message(m)
    await pilot.pause()


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
