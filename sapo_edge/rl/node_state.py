"""A node's round state, declared once (issue 46): what a round changes besides the model and
the pool, and must be as it was when a round is stopped (the trainer's rollback), written with a
checkpoint (save_node) and read back on resume (resume_node). A state added here is rolled back,
saved and resumed alike; tests/test_node_state.py fails when a node holds a state_dict-bearing
object this list does not name.

Each part: its name (the checkpoint's key), how to get it as JSON-able data and how to put it
back; `since_older`: a checkpoint of an older version may lack it (its default stays)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..data.task_sampler import node_seed
from .node_parts import NodeParts


@dataclass(frozen=True)
class Part:
    name: str
    get: Callable[[Any], Any]
    put: Callable[[Any, Any], None]
    since_older: bool = False  # an older checkpoint may not have it
    words: str = ""  # what people call it ("" : its name)


def _rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(data: list) -> tuple:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)


def _put_sampler(node: NodeParts, state: Any) -> None:
    """A checkpoint from before data/seeds.py (issue 56) drew its questions from the node seed
    itself (task_sampler.node_seed): its stream goes on from where it was, its rng and mix with
    it. A state saved with any other seed is refused, as before."""
    if isinstance(state, dict) and state.get("seed") == node_seed(node.node_id, node.cfg.seed):
        node.sampler.seed = state["seed"]
    node.sampler.load_state_dict(state)


PARTS = (
    Part("sampler", lambda n: n.sampler.state_dict(), _put_sampler),
    Part(
        "rng",
        lambda n: _rng_to_json(n.rng.getstate()),
        lambda n, v: n.rng.setstate(_rng_from_json(v)),
    ),
    Part(
        "mix",
        lambda n: n.mix.state_dict(),
        lambda n, v: n.mix.load_state_dict(v),
        True,
        "adaptive mix",
    ),
    Part(
        "success", lambda n: n.success.state_dict(), lambda n, v: n.success.load_state_dict(v), True
    ),
)
STATEFUL = ("sampler", "mix", "success")  # the node's attributes whose state PARTS holds


def snapshot(node: NodeParts) -> dict[str, Any]:
    """The node's round state now (fresh data: later rounds do not change it)."""
    return {p.name: p.get(node) for p in PARTS}


def restore(
    node: NodeParts, state: dict[str, Any], unreadable: Callable[[str, Exception], None]
) -> None:
    """Put `state` back. A part an older checkpoint lacks keeps its default; one it holds in a
    form this version cannot read is reported to `unreadable` (its words, why) and starts afresh
    where it may (`since_older`), else the error stands."""
    for p in PARTS:
        if p.name not in state:
            if p.since_older:
                continue
            raise KeyError(f"the node state lacks {p.name!r}")
        try:
            p.put(node, state[p.name])
        except (ValueError, TypeError, KeyError) as e:
            if not p.since_older:
                raise
            unreadable(p.words or p.name, e)


def never(_part: str, error: Exception) -> None:
    """restore's `unreadable` for a node's own snapshot (a stopped round's): always readable."""
    raise error
