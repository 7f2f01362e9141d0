"""The body of a service's own thread (the links layer, the class host): a fresh event loop that
runs the service's `_startup()`, tells `start()` it is ready (or why not, in `_error`), then
runs until the service stops the loop."""

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
        loop.close()
        return
    service._ready.set()
    try:
        loop.run_forever()
    finally:
        loop.close()
