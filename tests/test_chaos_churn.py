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

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)

    async def run() -> None:
        for failures in range(1, 11):
            for _ in range(20):
                await a._backoff(failures)

    asyncio.run(run())
    for failures in range(1, 11):
        cap = min(60.0, 2 ** (failures - 1))
        mine = slept[(failures - 1) * 20 : failures * 20]
        assert all(cap * 0.5 <= s <= cap for s in mine)
        assert len(set(mine)) > 10  # jittered: a restarted relay is not hit by one burst
