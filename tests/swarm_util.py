"""Helpers for the swarm tests: valid rollout batches signed by a given node, and loopback
NetworkTransports with short heartbeats and timeouts."""

from __future__ import annotations

import asyncio
from typing import Any

from sapo_edge.data.rollout import RolloutGroup, encode_batch
from sapo_edge.data.tasks import TaskRef
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.network import NetworkTransport

# the bound on a test's wait for an event: generous, since a wait ends as soon as the event
# happens (a loaded machine only makes it take longer; a broken one fails after this)
WAIT = 60.0

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

    def wait_for(self, predicate: Any, timeout: float = WAIT) -> bool:
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


KEYS = None  # set below: the keys of the default open room every test node joins


def keys_of(room: str = "default", secret: str = "") -> Any:
    from sapo_edge.swarm.roomkey import room_keys

    return room_keys(room, secret)


KEYS = keys_of()


def envelope(ident: Identity, keys: Any = None, round_: int = 1, start: int = 0, **kw) -> bytes:
    """A signed rollouts envelope of two valid groups, not yet sealed."""
    from sapo_edge.swarm.batches import make_rollouts

    keys = keys or KEYS
    return make_rollouts(ident, keys, batch_for(ident, round_, start=start), round_, **kw)[0]


def sealed(ident: Identity, keys: Any = None, round_: int = 1, start: int = 0, **kw) -> bytes:
    from sapo_edge.swarm.batches import seal

    keys = keys or KEYS
    return seal(keys, envelope(ident, keys, round_, start, **kw))


class Client:
    """A hand-driven peer: an aiohttp websocket that ran the real handshake."""

    def __init__(self, http: Any, ws: Any, session: Any) -> None:
        self.http, self.ws, self.session = http, ws, session

    async def send_sealed(self, data: bytes) -> None:
        from sapo_edge.swarm.handshake import KIND_SEALED

        await self.session.channel.send(KIND_SEALED, data)

    async def send_message(self, data: bytes) -> None:
        from sapo_edge.swarm.handshake import KIND_MESSAGE

        await self.session.channel.send(KIND_MESSAGE, data)

    async def recv(self, timeout: float = 5.0) -> Any:
        """(kind, data) of the next frame, or Closed."""
        from sapo_edge.swarm.peer import Closed, read_raw

        raw = await read_raw(self.ws, timeout)
        if isinstance(raw, Closed):
            return raw
        return self.session.channel.open(raw)

    async def close(self) -> None:
        await self.ws.close()
        await self.http.close()


async def connect(
    url: str, ident: Identity, keys: Any = None, *, relay: bool = False, **ws_kw: Any
) -> Client:
    """Dial `url` (ws://HOST:PORT) and run the handshake as a node; HandshakeError on refusal."""
    import aiohttp

    from sapo_edge.swarm.handshake import handshake

    keys = keys or KEYS
    http = aiohttp.ClientSession()
    try:
        ws = await http.ws_connect(
            url.rstrip("/") + ("" if url.endswith("/ws") else "/ws"), **ws_kw
        )
        session = await handshake(
            ws,
            ident,
            keys.relay_id if relay else keys.lan_id,
            b"" if relay else keys.link_psk,
            initiator=True,
            timeout=3.0,
            expect_role="relay" if relay else "node",
        )
    except BaseException:
        await http.close()
        raise
    return Client(http, ws, session)


async def read_until_closed(ws: Any, within: float = 10.0) -> None:
    """Read (and ignore) frames until the other side closes `ws`: TimeoutError after `within`
    seconds, so a side that never hangs up fails the test instead of hanging it."""
    from sapo_edge.swarm.peer import read_raw

    async with asyncio.timeout(within):
        while not ws.closed:
            await read_raw(ws, timeout=within)


def fake_paths(links, peers=()):
    """What NetworkTransport.paths() gives for a fake transport with these live links' keys
    (node ids, 'relay:URL') and PeerInfo rows (their `connection` is how they are linked)."""
    from sapo_edge.swarm.paths import Paths
    from sapo_edge.swarm.routes import is_relay

    keys = list(links)
    direct = {p.node_id: p.connection for p in peers if p.node_id in keys}
    return Paths(direct, any(is_relay(k) for k in keys), frozenset())
