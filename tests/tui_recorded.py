"""Recorded dashboard messages (deterministic data, no training) for the snapshot tests."""

from __future__ import annotations

from sapo_edge.swarm.peers import PeerInfo
from sapo_edge.tui.messages import (
    NodeStarted,
    PeersUpdated,
    PhaseStarted,
    Rollout,
    RolloutsSeen,
    RoundDone,
)

T0 = 1_800_000_000.0
REWARDS = [0.10, 0.15, 0.12, 0.22, 0.25, 0.31, 0.28, 0.36, 0.40, 0.44, 0.41, 0.50]
SWARM = [None, 0.12, 0.16, 0.20, 0.21, 0.27, 0.30, 0.33, 0.35, 0.39, 0.43, 0.45]
DOMAINS = ["basic_arithmetic", "base_conversion", "fraction_simplification"]


def recorded_messages() -> list:
    msgs: list = [
        NodeStarted(
            name="alice",
            node_id="alice-2c6eef17",
            room="physics-lab",
            transport="lan (2 peers)",
            backend="torch",
            device="cpu",
            dtype="float32",
            model="HuggingFaceTB/SmolLM2-135M-Instruct",
            lora_parameters=2_442_240,
            memory_mb=1480.0,
            rounds=100,
            local_samples=4,
            external_samples=4,
        )
    ]
    t = T0
    for i, (r, s) in enumerate(zip(REWARDS, SWARM, strict=True)):
        msgs.append(PhaseStarted(i, "sampling", t, t, 30.0 if i else None))
        msgs.append(
            RoundDone(
                round=i,
                reward_mean=r,
                swarm_reward=s,
                reward_by_domain={d: min(1.0, r * (k + 1) / 2) for k, d in enumerate(DOMAINS)},
                gen_tokens=6000,
                gen_seconds=20.0,
                round_seconds=30.0,
                loss=0.0123 - i * 0.001,
                memory_mb=1500.0 + i,
                local_used=4,
                external_used=4 if i else 0,
                received=6 if i else 0,
                pool_size=10 + i,
            )
        )
        t += 30.0
    msgs.append(PhaseStarted(12, "training", t + 12.0, t, 30.0))
    msgs.append(
        PeersUpdated(
            [
                PeerInfo(
                    "bob-9f1c2d3e",
                    "bob",
                    "Qwen/Qwen2.5-0.5B-Instruct",
                    "mlx",
                    "lan",
                    t - 4,
                    66,
                    60,
                    6,
                    {"duplicate": 4, "bad_json": 2},
                    0.41,
                ),
                PeerInfo(
                    "carol-77aa01b2",
                    "carol",
                    "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "torch/cuda",
                    "relay",
                    t - 125,
                    40,
                    40,
                    0,
                    {},
                    0.30,
                ),
            ],
            now=t,
            source="transport",
        )
    )
    msgs.append(
        RolloutsSeen(
            [
                Rollout(
                    11,
                    "basic_arithmetic",
                    "Calculate 7 + 5.",
                    "7 plus 5 is <answer>12</answer>",
                    1.0,
                    "local",
                ),
                Rollout(
                    11,
                    "base_conversion",
                    "Convert 1011 from base 2 to base 10.",
                    "The answer is 13.",
                    0.0,
                    "local",
                ),
                Rollout(
                    11,
                    "fraction_simplification",
                    "Simplify the fraction 6/8.",
                    "Divide both by 2: <answer>3/4</answer>",
                    1.0,
                    "bob",
                    aha=True,
                ),
                Rollout(
                    11, "basic_arithmetic", "Calculate 3 + 9.", "<answer>12</answer>", 1.0, "carol"
                ),
            ]
        )
    )
    return msgs
