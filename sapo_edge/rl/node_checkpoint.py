"""What a node's checkpoint holds and how a run resumes from it: the adapter (the backend's
files), the peer pool (pool.json) and state.json (next round, question stream, random state,
adaptive mix, per-domain success), written atomically by checkpoints.py. Resuming also cuts
metrics.jsonl back to the checkpoint, so rounds run after it are run again, not counted twice."""

from __future__ import annotations

import json
from pathlib import Path

from .checkpoints import find_latest, save_checkpoint
from .metrics import truncate_metrics
from .node_parts import NodeParts
from .node_state import restore, snapshot

POOL_FILE = "pool.json"  # the peer pool, saved with each checkpoint


def save_node(node: NodeParts) -> Path:
    """Checkpoint a trainer.Node at its next round (its `saving` phase has begun)."""
    state = {
        "round": node.round,  # the next round to run
        "node_id": node.node_id,
        "name": node.name,
        "model_id": node.model_id,
        "config": node.cfg.to_saved_dict(),  # never the room secret
        "received_carry": node._received_carry,
        **snapshot(node),  # node_state.PARTS
    }
    pool = json.dumps(node.pool.state_dict())

    def write_files(directory: Path) -> None:
        node.backend.save(directory)
        (directory / POOL_FILE).write_text(pool, encoding="utf-8")

    path = save_checkpoint(
        node.checkpoint_dir, node.round, write_files, state, keep=node.cfg.keep_checkpoints
    )
    node.saved = (node.round, path)
    return path


def saved_node_id(node_dir: Path) -> str | None:
    """The node id the newest complete checkpoint in `node_dir` was saved with (None: none):
    a class member's run (its identity's id) continues alone under `--solo` with it, and its
    question stream, which is drawn from the id, goes on as it was."""
    ckpt = find_latest(Path(node_dir) / "checkpoints", log=lambda _m: None)
    node_id = ckpt.state.get("node_id") if ckpt is not None else None
    return node_id if isinstance(node_id, str) and 0 < len(node_id) <= 64 else None


def resume_node(node: NodeParts) -> bool:
    """Continue a trainer.Node from the newest complete checkpoint; False when there is none."""
    ckpt = find_latest(node.checkpoint_dir, log=lambda m: node.callback.on_message(node.name, m))
    if ckpt is None:
        node.callback.on_message(
            node.name, f"no checkpoint in {node.checkpoint_dir}: starting at round 0"
        )
        truncate_metrics(node.metrics_path, 0)  # rounds recorded before a kill are run again
        return False
    st = ckpt.state
    if st.get("model_id") != node.model_id:
        raise ValueError(
            f"checkpoint {ckpt.path} was trained on {st.get('model_id')!r}, not {node.model_id!r}: "
            "pass the same --model, or a fresh --out-dir."
        )
    node.backend.load(ckpt.path)
    node._received_carry = int(st.get("received_carry", 0))

    def unreadable(part: str, _e: Exception) -> None:  # an older version's: its evidence lost
        node.callback.on_message(
            node.name, f"the saved {part} is an older version's: it starts afresh"
        )

    restore(node, st, unreadable)  # node_state.PARTS (an older checkpoint may lack some)
    if (ckpt.path / POOL_FILE).is_file():  # checkpoints of older versions have none
        try:
            dropped = node.pool.load_state_dict(
                json.loads((ckpt.path / POOL_FILE).read_text(encoding="utf-8"))
            )
        except (ValueError, TypeError) as e:  # written by another version: not worth a stop
            dropped = f"all ({e})"
        if dropped:
            node.callback.on_message(
                node.name, f"{dropped} saved peer groups cannot be read here: left out"
            )
    node.round = int(st["round"])
    node.saved = (node.round, ckpt.path)
    truncate_metrics(node.metrics_path, node.round)
    node.callback.on_message(node.name, f"resumed from {ckpt.path.name}: next round {node.round}")
    return True
