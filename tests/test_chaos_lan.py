"""A real LAN in network namespaces (bench/chaos_lan.py; root on Linux, skipped elsewhere with
the reason): 3 `sapo-edge run` processes on a bridge find each other by mDNS multicast, exchange,
lose one member to a cut link, and take it back once the link is restored; no round stalls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import chaos_lan  # noqa: E402

# outside `make test` (it needs root and takes 1-4 minutes): `make chaos-lan`, which CI runs. It
# once failed 1 run in 4 (no mesh seen in 150 s): a lost log line, see docs/reliability.md;
# bench/netns_repeat.py runs it N times
# three node processes load torch and the model first: 19-129 s on a loaded 2-core machine
pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.timeout(900)]


def test_nodes_in_namespaces_find_each_other_partition_and_heal(tiny_qwen, tmp_path):
    why = chaos_lan.can_netns()
    if why:
        pytest.skip(why)
    tmp_path.chmod(0o755)
    got = chaos_lan.run_lan(tiny_qwen, tmp_path, n=3, cut_s=8.0, timeout=150.0)
    assert got["ok"], (got["why"], chaos_lan.tails(tmp_path, got), got)
    assert got["heal_s"] < 70.0  # within the dialer's longest backoff (reconnect_max 60 s)
    assert all(r["round_s_max"] < 30.0 for r in got["rounds"].values())
