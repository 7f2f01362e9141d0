"""A service's loop thread (swarm/loop_thread.py) ends cleanly: tasks still running when the
service stops its loop are cancelled and awaited before the loop closes, so their clean-up runs
and nothing is destroyed pending (the nats-py warnings seen at the end of a test run)."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings

from sapo_edge.swarm.loop_thread import run_service_loop


class Service:
    def __init__(self) -> None:
        self._ready, self._error, self._loop = threading.Event(), None, None
        self.cleaned = threading.Event()

    async def _startup(self) -> None:
        async def background() -> None:  # like a client's ping or reconnect task
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0)  # clean-up that needs the loop
                self.cleaned.set()

        self.task = asyncio.get_running_loop().create_task(background())


def test_a_stopped_service_loop_cancels_and_awaits_its_tasks() -> None:
    svc = Service()
    t = threading.Thread(target=run_service_loop, args=(svc,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.start()
        assert svc._ready.wait(30)
        svc._loop.call_soon_threadsafe(svc._loop.stop)
        t.join(30)
        assert not t.is_alive()
        del svc.task
        gc.collect()
    assert svc.cleaned.is_set()  # its finally ran on the loop before the loop closed
    assert svc._loop.is_closed()
    assert not [w for w in caught if "never awaited" in str(w.message)]
