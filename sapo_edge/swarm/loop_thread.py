"""The body of a service's own thread (the links layer, the class host): a fresh event loop that
runs the service's `_startup()`, tells `start()` it is ready (or why not, in `_error`), then
runs until the service stops the loop. Before the loop closes, every task still on it is
cancelled and awaited (as asyncio.run does): a task left pending, such as a NATS client's
reconnect or ping task, would otherwise be destroyed with its loop and warn that its coroutine
never finished, or run a callback on a closed loop."""

from __future__ import annotations

import asyncio
from typing import Any


def run_service_loop(service: Any) -> None:
    """Uses `service._startup()` (a coroutine), `service._ready` (a threading.Event), and sets
    `service._loop` and, when start-up fails, `service._error`."""
    loop = asyncio.new_event_loop()
    service._loop = loop
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(service._startup())
    except BaseException as e:  # noqa: BLE001 - reported to start()'s caller
        service._error = e
        service._ready.set()
        _close(loop)
        return
    service._ready.set()
    try:
        loop.run_forever()
    finally:
        _close(loop)


def _close(loop: asyncio.AbstractEventLoop, timeout: float = 10.0) -> None:
    """Cancel what is still running on the loop, let it finish (bounded), then close it."""
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=timeout))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
