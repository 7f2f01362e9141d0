"""Members the class's host removed (its signed word, heard by every member: classroom/removal.py):
this laptop refuses their links at the handshake and their batches at the intake, by whatever
route (a direct link, the relay, NATS), drops the batches they have waiting in the inbox and
closes a link that is up; until the host readmits them. A part of network.py's NetworkTransport.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .link_life import send_bye


def remove(net: Any, node_id: str) -> int:
    """Refuse `node_id` from now on (any thread); returns the batches of its dropped unread."""
    with net.book.changed:
        net.book.removed.add(node_id)
        dropped = net.intake.inbox.purge(node_id)
        net.counters["removed_members"] = len(net.book.removed)
        net.counters["dropped_removed"] += dropped
    loop = net._loop
    if loop is not None and loop.is_running():
        asyncio.run_coroutine_threadsafe(_hang_up(net, node_id), loop)
    return dropped


def readmit(net: Any, node_id: str) -> None:
    """Let `node_id` link and send again (any thread)."""
    with net.book.changed:
        net.book.removed.discard(node_id)
        net.counters["removed_members"] = len(net.book.removed)


async def _hang_up(net: Any, node_id: str) -> None:
    link = net.table.links.get(node_id)
    if link is not None:
        await send_bye(link.session, link.ws, "removed", "the class's host removed this member.")
