"""Settings a running node takes between rounds (Node.configure: the trainer, the reward, the
pool and the backend all see them) and the ones that need a restart (RESTART_SETTINGS)."""

from __future__ import annotations

import dataclasses

from ..config.loading import fields_where
from ..config.settings import Config, ConfigError
from .node_parts import NodeParts
from .rewards import RewardConfig

# Settings a running node cannot take (apply_settings refuses them with this reason): the model
# and LoRA shape are loaded, the question stream is seeded from them, the loop counts rounds
# (`when="load"` or `"restart"` in config/settings.py).
RESTART_SETTINGS = fields_where(Config, "when", "load", "restart")


def apply_settings(node: NodeParts, changes: dict) -> None:
    """Take new settings into a trainer.Node from the next round: the trainer, the reward, the
    pool and the backend all see them. Raises ConfigError (nothing applied) for a bad value or a
    setting that needs a restart."""
    fixed = sorted(
        k for k, v in changes.items() if k in RESTART_SETTINGS and v != getattr(node.cfg, k, v)
    )
    if fixed:
        raise ConfigError(
            f"{', '.join(fixed)} cannot change while the node runs (the model, LoRA shape and "
            "question stream are set at start): restart sapo-edge with the new value."
        )
    cfg = dataclasses.replace(node.cfg, **changes)  # __post_init__ validates
    try:
        node.backend.configure(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    node.cfg, node.rewards = cfg, reward_config(cfg)
    node.pool.freshness_rounds = cfg.freshness_rounds
    node.pool.max_age_rounds = 4 * cfg.freshness_rounds
    node.pool.max_peer_share = cfg.max_peer_share
    cfg.save(node.out_dir / "config.json")


def reward_config(cfg: Config) -> RewardConfig:
    return RewardConfig(
        lenient=cfg.lenient,
        lenient_credit=cfg.lenient_credit,
        format_reward=cfg.format_reward,
        partial_credit=cfg.partial_credit,
    )
