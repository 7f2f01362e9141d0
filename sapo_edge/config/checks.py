"""Config's validation: every setting checked, each refusal a sentence with the fix."""

from __future__ import annotations

import math
from typing import Any

from ..data.addresses import hostport
from .errors import ConfigError
from .presets import preset_names

BACKENDS = ("auto", "torch", "cuda", "mps", "cpu", "mlx")
DTYPES = ("auto", "float32", "bfloat16", "float16")
SHARE_POLICIES = ("all", "informative", "none")
MIXES = ("fixed", "adaptive")  # how J is chosen each round (sapo_edge/rl/mix.py)
EXTERNAL_SAMPLINGS = ("uniform", "targeted")  # how the J are drawn (sapo_edge/rl/targeting.py)
AFTER_ANSWER = ("drop", "train")  # a peer's text after its answer (sapo_edge/rl/peer_text.py)


def validate(cfg: Any) -> None:
    """Raise ConfigError, with the fix, for the first setting of `cfg` (a Config) a run cannot use."""

    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise ConfigError(msg)

    need(
        cfg.preset == "" or cfg.preset in preset_names(),
        f"preset {cfg.preset!r} is unknown: use one of {', '.join(preset_names())}.",
    )
    need(
        cfg.backend in BACKENDS,
        f"backend {cfg.backend!r} is unknown: use one of {', '.join(BACKENDS)}.",
    )
    need(
        cfg.dtype in DTYPES,
        f"dtype {cfg.dtype!r} is unknown: use one of {', '.join(DTYPES)}.",
    )
    need(
        cfg.share in SHARE_POLICIES,
        f"share {cfg.share!r} is unknown: use one of {', '.join(SHARE_POLICIES)}.",
    )
    need(
        isinstance(cfg.model, str) and cfg.model.strip() != "",
        "model is empty: pass --model NAME_OR_PATH.",
    )
    need(
        cfg.group_size >= 2,
        f"group_size is {cfg.group_size}: GRPO compares completions within a group, so use 2 or more.",
    )
    need(
        cfg.questions_per_round >= 1,
        f"questions_per_round is {cfg.questions_per_round}: use 1 or more.",
    )
    need(
        cfg.local_samples >= 0 and cfg.external_samples >= 0,
        "local_samples (I) and external_samples (J) must be 0 or more.",
    )
    need(
        cfg.local_samples + cfg.external_samples > 0,
        "local_samples + external_samples is 0: the node would never train; the paper's default is I=4, J=4.",
    )
    need(
        cfg.local_samples <= cfg.questions_per_round,
        f"local_samples (I={cfg.local_samples}) exceeds questions_per_round ({cfg.questions_per_round}): a node has only that many own groups per round, so lower local_samples or raise questions_per_round.",
    )
    need(
        cfg.mix in MIXES,
        f"mix {cfg.mix!r} is unknown: use one of {', '.join(MIXES)}.",
    )
    need(
        cfg.mix != "adaptive"
        or cfg.local_samples + cfg.external_samples - 6 <= cfg.questions_per_round,
        f"mix adaptive takes J up to 6, so I = local_samples + external_samples - J is at least "
        f"{cfg.local_samples + cfg.external_samples - 6}, more than questions_per_round "
        f"({cfg.questions_per_round}): lower local_samples or raise questions_per_round.",
    )
    need(
        cfg.external_sampling in EXTERNAL_SAMPLINGS,
        f"external_sampling {cfg.external_sampling!r} is unknown: use one of "
        f"{', '.join(EXTERNAL_SAMPLINGS)}.",
    )
    need(
        cfg.external_after_answer in AFTER_ANSWER,
        f"external_after_answer {cfg.external_after_answer!r} is unknown: use drop (the default: "
        "a peer's text after its answer is not trained) or train (all of it, as in the paper).",
    )
    need(
        _finite(cfg.targeted_share) and 0.0 < cfg.targeted_share <= 1.0,
        f"targeted_share is {cfg.targeted_share}: use a share in (0, 1], e.g. 0.5.",
    )
    need(
        cfg.external_sampling != "targeted" or cfg.local_samples >= 1,
        "external_sampling targeted needs local_samples of 1 or more, so a node never trains "
        "only on peers: raise local_samples (I) or use external_sampling uniform.",
    )
    need(cfg.share_max >= 0, "share_max must be 0 (no cap) or more.")
    need(cfg.freshness_rounds >= 0, "freshness_rounds must be 0 or more.")
    need(
        0.0 < cfg.max_peer_share <= 1.0,
        f"max_peer_share is {cfg.max_peer_share}: use a share in (0, 1].",
    )
    need(cfg.max_new_tokens >= 1, f"max_new_tokens is {cfg.max_new_tokens}: use 1 or more.")
    need(
        cfg.max_prompt_tokens >= 16,
        f"max_prompt_tokens is {cfg.max_prompt_tokens}: use 16 or more.",
    )
    need(
        _finite(cfg.temperature) and cfg.temperature > 0,
        f"temperature is {cfg.temperature}: use a positive number (1.0 as in the paper).",
    )
    need(
        _finite(cfg.top_p) and 0 < cfg.top_p <= 1,
        f"top_p is {cfg.top_p}: use a value in (0, 1].",
    )
    need(
        _finite(cfg.lenient_credit) and 0 <= cfg.lenient_credit <= 1,
        "lenient_credit must be in [0, 1].",
    )
    need(
        _finite(cfg.format_reward) and 0 <= cfg.format_reward <= 1,
        "format_reward must be in [0, 1].",
    )
    need(
        _finite(cfg.learning_rate) and cfg.learning_rate > 0,
        f"learning_rate is {cfg.learning_rate}: use a positive number such as 5e-5.",
    )
    need(_finite(cfg.clip_low) and 0 <= cfg.clip_low < 1, "clip_low must be in [0, 1).")
    need(_finite(cfg.clip_high) and cfg.clip_high >= 0, "clip_high must be 0 or more.")
    need(_finite(cfg.beta) and cfg.beta >= 0, "beta must be 0 or more.")
    need(
        _finite(cfg.max_grad_norm) and cfg.max_grad_norm >= 0,
        "max_grad_norm must be 0 (off) or more.",
    )
    need(cfg.micro_batch_size >= 0, "micro_batch_size must be 0 (auto) or more.")
    need(
        _finite(cfg.round_target) and cfg.round_target > 0,
        "round_target must be a number of seconds above 0, e.g. --round-target 120.",
    )
    need(0 <= cfg.threads <= 1024, "threads must be 0 (adaptive) to 1024, e.g. --threads 2.")
    need(cfg.lora_r >= 1, f"lora_r is {cfg.lora_r}: use 1 or more (16 is typical).")
    need(_finite(cfg.lora_alpha) and cfg.lora_alpha > 0, "lora_alpha must be positive.")
    need(
        _finite(cfg.lora_dropout) and 0 <= cfg.lora_dropout < 1,
        "lora_dropout must be in [0, 1).",
    )
    need(
        isinstance(cfg.lora_targets, list)
        and len(cfg.lora_targets) > 0
        and all(isinstance(t, str) for t in cfg.lora_targets),
        "lora_targets must be a non-empty list of module names, e.g. ['q_proj', 'v_proj'].",
    )
    need(cfg.rounds >= 0, "rounds must be 0 or more.")
    need(cfg.checkpoint_every >= 0, "checkpoint_every must be 0 or more.")
    need(cfg.keep_checkpoints >= 1, "keep_checkpoints must be 1 or more.")
    need(cfg.nodes >= 1, f"nodes is {cfg.nodes}: use 1 or more.")
    need(
        isinstance(cfg.node_backends, list) and all(b in BACKENDS for b in cfg.node_backends),
        f"node_backends {cfg.node_backends}: use a comma list of {', '.join(BACKENDS)}.",
    )
    hinted = cfg.hinted_nodes
    need(
        isinstance(hinted, list)
        and all(isinstance(k, int) and not isinstance(k, bool) for k in hinted)
        and all(0 <= k < cfg.nodes for k in hinted)
        and len(set(hinted)) == len(hinted),
        f"hinted_nodes {hinted}: list different node numbers from 0 to {cfg.nodes - 1}, "
        "e.g. --hinted-nodes 0.",
    )
    need(
        isinstance(cfg.hint, str) and valid_hint(cfg.hint),
        f"hint {cfg.hint!r}: write host, a number of students (2), or both (host,2); "
        "empty for no hint.",
    )
    need(cfg.hint_rounds >= 0, "hint_rounds must be 0 (the hinted nodes run every round) or more.")
    need(
        cfg.name.replace("-", "").replace("_", "").isalnum() and len(cfg.name) <= 40,
        f"name {cfg.name!r}: use letters, digits, '-' and '_' (at most 40).",
    )
    need(
        isinstance(cfg.room, str) and 0 < len(cfg.room) <= 64,
        f"room {cfg.room!r}: use a name of 1 to 64 characters.",
    )
    need(
        hostport(cfg.listen, allow_zero=True),
        f"listen {cfg.listen!r}: write PORT, HOST or HOST:PORT, e.g. 7744 or 0.0.0.0:7744.",
    )
    for p in cfg.peer:
        need(
            isinstance(p, str) and hostport(p, allow_zero=False),
            f"peer {p!r}: write HOST or HOST:PORT, e.g. 192.168.1.20 or 192.168.1.20:7744.",
        )
    need(
        cfg.relay == ""
        or (cfg.relay.startswith(("ws://", "wss://")) and len(cfg.relay) > 6)
        or _nats_relay_ok(cfg.relay),
        f"relay {cfg.relay!r}: write HOST, HOST:PORT, ws://HOST:PORT or nats://HOST:4222 (or leave it empty)"
        + _nats_relay_problem(cfg.relay),
    )
    need(
        cfg.max_inbound_groups >= 1,
        f"max_inbound_groups is {cfg.max_inbound_groups}: use 1 or more (default 128).",
    )
    need(
        isinstance(cfg.domains, dict) and len(cfg.domains) > 0,
        "domains must map domain names to weights.",
    )
    for d, w in cfg.domains.items():
        need(
            isinstance(w, int | float) and not isinstance(w, bool) and _finite(w) and w >= 0,
            f"domains.{d}: weight {w!r} must be a number 0 or more.",
        )
    need(
        any(w > 0 for w in cfg.domains.values()),
        "every domain weight is 0: give at least one domain a positive weight.",
    )
    need(
        isinstance(cfg.domain_configs, dict)
        and all(isinstance(v, dict) for v in cfg.domain_configs.values()),
        "domain_configs must map a domain name to a table of reasoning-gym settings.",
    )
    for d in cfg.domain_configs:
        need(
            d in cfg.domains,
            f"domain_configs has {d!r}, which is not among domains ({', '.join(cfg.domains)}): add it to domains or remove its config.",
        )


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _nats_relay_problem(relay: str) -> str:
    """'; why' for a nats:// or tls:// relay that cannot be used, else '.'."""
    from ..swarm.nats_room import is_nats_url, nats_servers

    if not is_nats_url(relay):
        return "."
    try:
        nats_servers(relay)
    except ValueError as e:
        return f"; {e}"
    return "."


def _nats_relay_ok(relay: str) -> bool:
    from ..swarm.nats_room import is_nats_url

    return is_nats_url(relay) and _nats_relay_problem(relay) == "."


def hint_plan(text: str) -> tuple[bool, int] | None:
    """`hint` as (the host sees the example, how many students do), or None when it is not one
    of "", "host", "K" or "host,K"."""
    host, students = False, 0
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "host" and not host:
            host = True
        elif part.isdigit() and not students and len(part) <= 4:
            students = int(part)
        else:
            return None
    return host, students


def valid_hint(text: str) -> bool:
    return hint_plan(text) is not None
