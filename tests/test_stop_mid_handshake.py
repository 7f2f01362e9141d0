"""Stopping a node while a caller is half-way through its handshake: the node closes that
websocket itself, so its stop does not wait out the handshake's timeout (nor aiohttp's 60 s for
handlers) and nothing is logged as unhandled. Seen in a namespace LAN run: a peer redialing as the
node stopped held the stop 10 s and aiohttp logged an InvalidStateError traceback at exit."""

import asyncio
import logging
import threading

import aiohttp
from swarm_util import WAIT


def test_stop_closes_a_handshake_in_progress(nodes, caplog):
    caplog.set_level(logging.ERROR)
    a = nodes(handshake_timeout=300.0)
    opened, closed = threading.Event(), threading.Event()

    async def silent_caller() -> None:
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"http://127.0.0.1:{a.port}/ws") as ws:
                opened.set()
                while True:  # never says hello; waits for the node to hang up
                    msg = await ws.receive(timeout=WAIT * 2)
                    if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                        break
                closed.set()

    caller = threading.Thread(target=lambda: asyncio.run(silent_caller()), daemon=True)
    caller.start()
    assert opened.wait(WAIT)
    assert a.wait_for(lambda: len(a.listener.serving) == 1, WAIT)
    a.close()
    assert closed.wait(WAIT), "the caller was never hung up on"
    assert a.counters["closed_at_stop"] == 1  # the node hung up itself, before aiohttp's cancel
    assert a.counters["stop_timed_out"] == 0
    assert not a.listener.serving
    unhandled = [r for r in caplog.records if r.name.startswith("aiohttp")]
    assert not unhandled, [r.getMessage() for r in unhandled]
