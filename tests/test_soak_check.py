"""What the soak (bench/chaos_soak.py) counts as a failure: a message refused, at a node or at
the relay; a connection cut by a kill (a handshake the peer hung up on, a link gone silent) is
what churn does, reported but not a failure, the same at the nodes as at the relay."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import chaos_soak  # noqa: E402


def result(node_rejected: dict, relay_rejected: dict) -> dict:
    return {
        "expected_deliveries": 100,
        "delivery_ratio": 1.0,
        "rejected_by_reason": node_rejected,
        "relay": {"rejected": relay_rejected},
        "churn": {"kill": 2},
    }


def test_connection_events_are_not_rejections_at_the_nodes_or_the_relay():
    # seen in a CI-like run: a node counted `closed` when a killed peer hung up mid-handshake
    events = {"closed": 1, "no_pong": 2, "timeout": 1, "ws_error": 3}
    assert chaos_soak.check(result(events, events)) == []


def test_a_refused_message_fails_the_soak_wherever_it_is_counted():
    assert chaos_soak.check(result({"closed": 1, "bad_signature": 1}, {})) == [
        "honest batches rejected: {'bad_signature': 1}"
    ]
    assert chaos_soak.check(result({}, {"replay": 2, "timeout": 1})) == [
        "the relay rejected: {'replay': 2}"
    ]
    assert chaos_soak.check(dict(result({}, {}), delivery_ratio=0.98)) == [
        "delivery ratio 0.98 (want >= 0.99)"
    ]
