"""A short soak (bench/chaos_soak.py runs 30 minutes): 6 node processes and the relay on
loopback with kills, leaves, restarts and guests every second or two; every batch published
while sender and receiver were up arrives, and no honest batch is rejected anywhere."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import chaos_soak  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.long]  # `make test-long`


def test_a_short_soak_with_churn_delivers_everything_and_rejects_nothing(tmp_path):
    result = chaos_soak.run_soak(0.5, 6, 1.0, 3, tmp_path, log=lambda _m: None, every=(1.0, 2.0))
    assert chaos_soak.check(result) == [], {k: v for k, v in result.items() if k != "samples"}
    assert sum(result["churn"].values()) >= 8
    assert result["relay_latency_ms"]["n"] > 0
