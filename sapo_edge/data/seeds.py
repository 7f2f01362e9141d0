"""A node's random streams, one per purpose, all from (node id, the run's seed) (issue 56).

The questions a node draws, its other random choices (which groups it shares and trains, the
peer groups it samples), the adaptive mix's bandit, its LoRA initialisation and its sampling
seeds each get their own seed, so a change in how one purpose uses its stream (one more draw
for the mix, a different shuffle) moves none of the others: two splits of one seed draw the same
questions whatever else differs. Each is a sha256 prefix like node_seed, 31-bit; held-out
questions use seeds from 2**40 up (run/evaluate.py), out of every stream's reach.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class NodeSeeds:
    questions: int  # TaskSampler: the question stream
    choices: int  # the trainer's rng: the shared subset, own and peer groups trained
    mix: int  # AdaptiveMix: the bandit's draws
    lora: int  # the fresh adapter's initial weights (backend.reset)
    generation: int  # the sampling seed of each round's completions (with the round added)


def stream_seed(node_id: str, base_seed: int, purpose: str) -> int:
    """A stable 31-bit seed for one purpose of one node of a run."""
    digest = hashlib.sha256(f"{base_seed}:{node_id}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31


def node_seeds(node_id: str, base_seed: int = 0) -> NodeSeeds:
    """Every stream's seed of one node, from its id and the run's seed."""
    return NodeSeeds(**{f.name: stream_seed(node_id, base_seed, f.name) for f in fields(NodeSeeds)})
