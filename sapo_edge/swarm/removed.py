"""Members the class's host removed (its signed word, heard by every member: classroom/removal.py):
this laptop refuses their links at the handshake and their batches at the intake, by whatever
route (a direct link, the relay, NATS), drops the batches they have waiting in the inbox and
closes a link that is up; until the host readmits them. A part of network.py's NetworkTransport.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .link_life import send_bye
from .routes import is_relay


def remove(net: Any, node_id: str) -> int:
    """Refuse `node_id` from now on (any thread); returns the batches of its dropped unread.
    This laptop's own id: it is out of the class, and takes no classmate's batch any more."""
    own = node_id == net.ident.node_id
    with net.book.changed:
        net.book.removed.add(node_id)
        net.book.shut_out = net.book.shut_out or own
        dropped = len(net.intake.inbox.drain()) if own else net.intake.inbox.purge(node_id)
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


HANG_UP_AFTER_S = 1.0  # what is queued on a link goes first (the host's word to the removed one)


async def _hang_up(net: Any, node_id: str) -> None:
    await asyncio.sleep(HANG_UP_AFTER_S)
    own = node_id == net.ident.node_id
    for key, link in list(net.table.links.items()):
        if key == node_id or (own and not is_relay(key)):
            await send_bye(
                link.session, link.ws, "removed", "the class's host removed this member."
            )
