"""Relay restart mid-run and a frozen peer (bench/chaos_churn.py repeats these for figures):
nodes reconnect to a restarted relay by themselves with jittered backoff, nothing arrives twice
and nothing honest is rejected; a SIGSTOPped peer process is dropped within the heartbeat
window and taken back after SIGCONT, without being muted."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import chaos_churn  # noqa: E402


@pytest.mark.slow
def test_nodes_come_back_to_a_restarted_relay_and_nothing_arrives_twice(tmp_path):
    got = chaos_churn.relay_restart(tmp_path, n=3, down_s=2.0)
    assert got["ok"], got
    assert len(set(got["reconnect_s"])) == 3  # not one burst


@pytest.mark.slow
def test_a_frozen_peer_is_dropped_within_the_heartbeat_window_and_taken_back(tmp_path):
    got = chaos_churn.freeze_peer(tmp_path, heartbeat=1.0, frozen_s=3.0)
    assert got["ok"], got
    assert got["drop_s"] <= 3.0 and not got["muted"]


def test_the_dialer_backs_off_exponentially_with_jitter(nodes, monkeypatch) -> None:
    a = nodes(reconnect_base=1.0, reconnect_max=60.0)
    slept: list[float] = []

    async def fake_nap(s: float) -> None:  # the backoff's wait (cut short by a wake-up)
        slept.append(s)

    monkeypatch.setattr(a.dialer, "_nap", fake_nap)

    async def run() -> None:
        for failures in range(1, 11):
            for _ in range(20):
                await a.dialer._backoff(failures)

    asyncio.run(run())
    for failures in range(1, 11):
        cap = min(60.0, 2 ** (failures - 1))
        mine = slept[(failures - 1) * 20 : failures * 20]
        assert all(cap * 0.5 <= s <= cap for s in mine)
        assert len(set(mine)) > 10  # jittered: a restarted relay is not hit by one burst


def _hang_up_mid_upgrade(port: int, times: int = 20) -> None:
    """Ask for a websocket upgrade and reset the connection at once (a laptop leaving Wi-Fi)."""
    import socket
    import struct

    req = (
        f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
    for _ in range(times):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(req)
        s.close()


def test_a_caller_hanging_up_mid_upgrade_logs_no_traceback(nodes, caplog) -> None:
    import logging
    import time

    from swarm_util import RelayThread, batch_for

    caplog.set_level(logging.DEBUG, logger="aiohttp")
    r = RelayThread()
    try:
        a = nodes()
        b = nodes(peers=[f"127.0.0.1:{a.port}"])
        _hang_up_mid_upgrade(a.port)
        _hang_up_mid_upgrade(int(r.url.rsplit(":", 1)[1].split("/")[0]))
        time.sleep(0.5)
        assert a.wait_for(lambda: len(a.connected()) == 1, 5)
        assert b.wait_for(lambda: len(b.connected()) == 1, 5)
        b.publish(batch_for(b.ident, 1))  # the node still works
        assert a.wait_for(lambda: a.counters["delivered"] == 1, 5)
    finally:
        r.close()
    logged = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert logged == [], [rec.getMessage() for rec in logged]
