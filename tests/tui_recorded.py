"""Recorded dashboard messages (deterministic data, no training) for the snapshot tests."""

from __future__ import annotations

from sapo_edge.swarm.peers import PeerInfo
from sapo_edge.tui.messages import (
    NodeStarted,
    NothingTrained,
    PeersUpdated,
    PhaseProgress,
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
    msgs.append(PhaseProgress(12, "training", 1, 2, 0, 0, 0, t + 16.0))
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


def node_started(**kw) -> NodeStarted:
    base = dict(
        name="swift-otter-3f2a",
        node_id="3f2a9c1be07d44a1b5c0d2e8f9a6b7c4",
        room="default",
        transport="solo (no peers)",
        backend="torch",
        device="cpu",
        dtype="float32",
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        lora_parameters=4_884_480,
        memory_mb=1626.0,
        rounds=100,
        local_samples=4,
        external_samples=4,
    )
    return NodeStarted(**{**base, **kw})


def first_round_messages() -> list:
    """A first round 40 s into generation: 64 completions of up to 256 tokens, 2 s per step."""
    msgs: list = [node_started(), PhaseStarted(0, "sampling", T0, T0, None)]
    msgs.append(PhaseStarted(0, "generating", T0 + 1.0, T0, None))
    for step in range(1, 20):
        ended = max(0, step - 10) * 2
        tokens = sum(64 - max(0, s - 11) * 2 for s in range(1, step + 1))
        msgs.append(PhaseProgress(0, "generating", step, 256, tokens, 64, ended, T0 + 1 + 2 * step))
    return msgs


def idle_round_messages() -> list:
    """SmolLM2 at the strict defaults: round 1 trained nothing, round 2 is generating."""
    msgs: list = [node_started(), PhaseStarted(0, "sampling", T0, T0, None)]
    msgs.append(
        RoundDone(
            0, 0.0, None, {"arc_1d": 0.0, "bf": 0.0}, 9800, 180.0, 181.0, 0.0, 3900.0, 0, 0, 0, 0
        )  # fmt: skip
    )
    msgs.append(
        NothingTrained(
            0,
            "all 8 groups scored alike (reward 0): the model never wrote <answer> tags, so every "
            "answer scored 0; no peer groups have arrived.",
            "A small model often needs lenient scoring: quit (q) and run the command printed on "
            "exit with --lenient (a right last number earns half credit), or use a bigger --model.",
        )
    )
    msgs.append(PhaseStarted(1, "sampling", T0 + 181, T0 + 181, 181.0))
    msgs.append(PhaseStarted(1, "generating", T0 + 182, T0 + 181, 181.0))
    msgs.append(PhaseProgress(1, "generating", 30, 256, 1920, 64, 3, T0 + 212))
    return msgs
