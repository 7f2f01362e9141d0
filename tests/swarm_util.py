"""Helpers for the swarm tests: valid rollout batches signed by a given node, and loopback
NetworkTransports with short heartbeats and timeouts."""

from __future__ import annotations

from typing import Any

from sapo_edge.rollout import RolloutGroup, encode_batch
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.network import NetworkTransport
from sapo_edge.tasks import TaskRef

FAST = dict(
    heartbeat=0.5,
    handshake_timeout=2.0,
    reconnect_base=0.05,
    reconnect_max=0.3,
    mdns=False,
    listen="127.0.0.1:0",
    log=lambda _m: None,
)


def group(producer: str, round_: int = 1, index: int = 0, **over: Any) -> RolloutGroup:
    fields: dict[str, Any] = dict(
        task_ref=TaskRef.make("basic_arithmetic", {"min_terms": 2}, seed=7, index=index),
        question=f"What is {index} + 3?",
        reference_answer=str(index + 3),
        completions=(f"<answer>{index + 3}</answer>", "<answer>0</answer>"),
        rewards=(1.0, 0.0),
        producer=producer,
        model="tiny",
        round=round_,
        created_at=1_700_000_000.0,
    )
    fields.update(over)
    return RolloutGroup(**fields)


def batch_for(ident: Identity, round_: int = 1, n: int = 2, start: int = 0) -> bytes:
    return encode_batch([group(ident.node_id, round_, start + i) for i in range(n)])


def net(ident: Identity | None = None, **kw: Any) -> NetworkTransport:
    opts = {**FAST, **kw}
    return NetworkTransport(ident or Identity.generate(), **opts).start()


class RelayThread:
    """A Relay served on 127.0.0.1 from its own loop thread (as `sapo-edge relay` would run)."""

    def __init__(self, **limits: Any) -> None:
        import asyncio
        import threading

        from aiohttp import web

        from sapo_edge.swarm.relay import Relay, RelayLimits

        self.relay = Relay(RelayLimits(**{"heartbeat": 0.5, "handshake_timeout": 2.0, **limits}))
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start() -> None:
            self.runner = web.AppRunner(self.relay.make_app(), access_log=None)
            await self.runner.setup()
            site = self.relay.site(self.runner, "127.0.0.1", 0)
            await site.start()
            self.port = site.bound_port

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        ready.wait(10)
        self.url = f"ws://127.0.0.1:{self.port}"

    def call(self, fn: Any) -> Any:
        """Run fn() on the relay's loop and return its result (state lives on that loop)."""
        import asyncio

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(5)

    def wait_for(self, predicate: Any, timeout: float = 5.0) -> bool:
        import asyncio

        async def wait() -> bool:
            async with self.relay.changed:
                try:
                    await asyncio.wait_for(self.relay.changed.wait_for(predicate), timeout)
                except TimeoutError:
                    return False
            return True

        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result(timeout + 5)

    def close(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
