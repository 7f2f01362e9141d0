"""Whole nodes (scripted policy) over real loopback websockets: rollouts flow into each other's
training, and when one node hangs mid-run the others keep their round times and drop it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from scripted import Quiet, ScriptedBackend, make_cfg
from swarm_util import net

from sapo_edge.rl.trainer import Node


@pytest.fixture
def swarm(tmp_path: Path):
    cfg = make_cfg(tmp_path)
    # rounds here take milliseconds: a pace of 600 a minute (5 s's worth at once at 60) keeps
    # pacing out of what these tests look at (test_chaos_pacing_and_clock.py tests it)
    fast = dict(max_batches_per_minute=600)
    a = net(**fast)
    b = net(peers=[f"127.0.0.1:{a.port}"], **fast)
    c = net(peers=[f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"], **fast)
    transports = [a, b, c]
    nodes = [
        Node(
            cfg,
            ScriptedBackend(),
            t,
            node_id=t.ident.node_id,
            name=n,
            model_id="scripted",
            out_dir=tmp_path / n,
            callback=Quiet(),
        )
        for n, t in zip("abc", transports, strict=True)
    ]
    for t in transports:
        assert t.wait_for(lambda t=t: len(t.connected()) == 2, 5)
    yield nodes, transports
    for t in transports:
        t.close()


def test_rollouts_flow_into_training_and_a_hung_node_is_dropped(swarm) -> None:
    (na, nb, nc), (a, b, c) = swarm
    first = [node.run_round() for node in (na, nb, nc)]
    for t in (a, b, c):
        assert t.wait_for(lambda t=t: t.counters["delivered"] == 2, 5)
    reports = [node.run_round() for node in (na, nb, nc)]
    for r0, r, me in zip(first, reports, (a, b, c), strict=True):
        others = {a.ident.node_id, b.ident.node_id, c.ident.node_id} - {me.ident.node_id}
        # round-0 batches arrive during round 0 or before round 1 (a node drains when it runs)
        assert r0.received + r.received >= 4 and r.external_used == 2
        assert set(r.external_from) <= others

    # c hangs: its network loop stops answering (as a frozen or killed process would)
    release = threading.Event()
    c._loop.call_soon_threadsafe(release.wait, 30)
    try:
        for _ in range(3):
            for node in (na, nb):
                t0 = time.perf_counter()
                node.run_round()  # publishes to c too: queued, never waited for
                assert time.perf_counter() - t0 < 10.0  # far below c's 30 s hang: never waits on c
        for t in (a, b):
            assert t.wait_for(lambda t=t: c.ident.node_id not in t.connected(), 5)
            assert t.rejections(c.ident.node_id)["no_pong"] == 1
            assert t.connected() == [(b if t is a else a).ident.node_id]
        before = b.counters["delivered"]
        na.run_round()  # a and b still exchange after dropping c
        assert b.wait_for(lambda: b.counters["delivered"] == before + 1, 5)
    finally:
        release.set()
