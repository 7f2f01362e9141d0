"""One Config dataclass: commented defaults and help text; loading, saving, presets applied.
Its validation is checks.py, the packaged presets presets.py (both beside it in config/).

Precedence: CLI flags > config file (TOML) > these defaults. The resolved config is saved as
JSON next to each node's checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.addresses import normalise_listen, normalise_peer, normalise_relay
from ..data.tasks import PAPER_DOMAINS
from .checks import validate
from .errors import ConfigError  # noqa: F401 - re-exported: where callers take it from
from .loading import config_from_dict, read_settings, write_settings
from .presets import load_preset, preset_names  # noqa: F401 - re-exported, as ConfigError

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _f(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, list | dict):
        return field(
            default_factory=lambda d=default: json.loads(json.dumps(d)),
            metadata={"help": help, **kw},
        )
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class Config:
    preset: str = _f(
        "",
        "Start from a packaged preset (`sapo-edge presets` lists them: demo, paper, addition, "
        "arithmetic); --config and flags override it.",
        scope="never",
    )
    # --- model and backend -------------------------------------------------------------
    model: str = _f(
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Hugging Face id, local directory, .gguf file, or alias (smollm2-135m).",
        when="load",
        scope="local",
    )
    backend: str = _f(
        "auto",
        "auto | torch | cuda | mps | cpu | mlx (auto: MLX on Apple Silicon, else CUDA, MPS, CPU).",
        when="load",
        scope="local",
    )
    dtype: str = _f(
        "auto",
        "auto | float32 | bfloat16 | float16 (auto: bfloat16 on CUDA; on CPUs with native bf16 the dtype whose round of this model ran (or is estimated) faster here, a one-second GEMM probe before any round ran: `sapo-edge doctor` says which and why; float32 elsewhere).",
        when="load",
        scope="local",
    )

    # --- tasks (reasoning-gym) ---------------------------------------------------------
    domains: dict = _f(
        {d: 1.0 for d in PAPER_DOMAINS},
        "Domain -> sampling weight; the SAPO paper's 9 reasoning-gym domains by default.",
        when="restart",
    )
    domain_configs: dict = _f(
        {},
        "Domain -> reasoning-gym config overrides (difficulty), e.g. {basic_arithmetic = {max_digits = 1}}.",
        when="restart",
    )
    questions_per_round: int = _f(8, "Questions sampled per round, one per domain (paper: 8).")
    group_size: int = _f(8, "Completions generated per question, the GRPO group G (paper: 8).")

    # --- SAPO mix (paper Algorithm 1) --------------------------------------------------
    local_samples: int = _f(4, "I: own question groups trained on per round (paper best: 4 of 8).")
    external_samples: int = _f(
        4, "J: groups from other nodes trained on per round (0 = isolated node)."
    )
    share: str = _f(
        "all", "Which own groups to publish each round: all | informative (rewards differ) | none."
    )
    share_max: int = _f(0, "Publish at most this many groups per round (0 = no cap).")
    freshness_rounds: int = _f(
        5, "External groups received within this many local rounds are preferred."
    )
    max_peer_share: float = _f(
        1.0, "At most this share of a round's external samples from one peer."
    )
    external_sampling: str = _f(
        "uniform",
        "How the J peer groups are drawn: uniform (the paper's: at random, fresh first) | "
        "targeted: first up to targeted_share of J from peer groups that teach this node "
        "something (questions or domains its own completions all failed this round, then "
        "domains where its recent success is below its average; never more than the own "
        "groups it trains, unless it trains none), the rest uniform (sapo_edge/rl/targeting.py).",
    )
    targeted_share: float = _f(
        0.5,
        "external_sampling targeted: at most this share of a round's J is picked for teaching "
        "this node something (rounded down); the rest is drawn uniformly.",
    )
    external_negatives: bool = _f(
        True,
        "Train on the peers' wrong answers too, pushed down by their negative advantage (the "
        "paper's) | false: peers teach by their right answers only, their completions with a "
        "negative advantage are trained at advantage 0 (they still count in the step's token "
        "normaliser, like any zero-advantage completion; own groups keep their advantages).",
    )
    external_after_answer: str = _f(
        "drop",
        "A peer's text after its answer (its closing </answer>, or lenient's last number): drop "
        "(not trained, its end of turn is: models learn to stop there) | train (the paper's: all "
        "of it, rewarded for an answer it is no part of; docs/results.md, Prank).",
    )
    mix: str = _f(
        "fixed",
        "fixed: train on I own + J peer groups every round | adaptive: each node picks J in "
        "{0, 2, 4, 6} (only J its pool can fill) for blocks of 4 rounds, from its own reward "
        "progress with the J it trained (a bandit, sapo_edge/rl/mix.py), with I + J = "
        "local_samples + external_samples (own groups fill in when peers fall short).",
        when="restart",
    )

    # --- generation --------------------------------------------------------------------
    max_new_tokens: int = _f(256, "Longest completion, in tokens.")
    temperature: float = _f(1.0, "Sampling temperature for rollouts.")
    top_p: float = _f(1.0, "Nucleus sampling for rollouts (1.0 = off).")
    max_prompt_tokens: int = _f(
        1024, "Questions whose prompt is longer are truncated from the left."
    )

    # --- reward ------------------------------------------------------------------------
    lenient: bool = _f(
        False, "No <answer> tag: score the last number instead (for weak models; off = strict)."
    )
    lenient_credit: float = _f(
        0.5, "A lenient (untagged) correct answer earns this fraction of a tagged one."
    )
    format_example: bool = _f(
        False,
        "Show one worked example (a question, then an answer ending in <answer>42</answer>) before "
        "each question: small models that ignore the system prompt's format copy it "
        "(SmolLM2-135M tags a third of its answers with it, none without).",
    )
    format_instruction: bool = _f(
        False,
        "Repeat the answer format's instruction in the user's turn after each question (the "
        "system prompt alone is all but ignored by SmolLM2-135M): experiments/aha_speedup.toml.",
    )
    format_reward: float = _f(
        0.0,
        "Bonus for exactly one well-formed <answer> tag (0 = off; the paper found it unnecessary).",
    )
    partial_credit: bool = _f(
        False,
        "Pass reasoning-gym's fractional scores through (off: binary reward, as in the paper).",
    )

    # --- GRPO / DAPO update ------------------------------------------------------------
    learning_rate: float = _f(5e-5, "AdamW learning rate for the LoRA weights.")
    clip_low: float = _f(0.2, "PPO clip below 1 (DAPO, arXiv 2503.14476: 0.2).")
    clip_high: float = _f(0.28, "PPO clip above 1, the DAPO 'clip-higher' (0.28).")
    beta: float = _f(
        0.0, "KL penalty to the base model (0 = no KL and no reference pass, as in the paper)."
    )
    scale_rewards: bool = _f(
        True, "Divide advantages by the group's std (off = Dr. GRPO, arXiv 2503.20783)."
    )
    max_grad_norm: float = _f(1.0, "Gradient clipping norm (0 = off).")
    micro_batch_size: int = _f(
        0,
        "Sequences per forward/backward pass: bounds memory (~0.2-0.4 GB per 128-token sequence "
        "for a 135M model in float32), not the update. 0 = auto: 1 on the CPU (torch runs each "
        "prompt once for all its micro-batches, so small ones cost it little), 4 on a GPU.",
        scope="local",
    )

    threads: int = _f(
        0,
        "CPU threads for torch's math. 0 = adaptive: the cores this process may use less what "
        "other programs use on them, re-checked every second (a busy core stalls every thread "
        "that waits for it); N pins N threads, as OMP_NUM_THREADS does.",
        scope="local",
    )

    round_target: float = _f(
        60.0,
        "Seconds a round should take on this laptop: with no --model or --preset, sapo-edge "
        "estimates each candidate setting's round here and picks the first (Qwen first) within it.",
    )

    # --- LoRA (peft on torch, mlx-lm tuner on MLX) -------------------------------------
    lora_r: int = _f(16, "LoRA rank.", when="load")
    lora_alpha: float = _f(32.0, "LoRA alpha (scale = alpha / r).", when="load")
    lora_dropout: float = _f(0.0, "LoRA dropout.", when="load")
    lora_targets: list = _f(
        LORA_TARGETS,
        "Module names that get LoRA adapters (attention and MLP projections).",
        when="load",
    )

    # --- run -----------------------------------------------------------------------------
    rounds: int = _f(100, "Rounds to train (each node, in sim).", when="restart", scope="both")
    seed: int = _f(
        0, "Base seed; each node's question stream derives from it and the node id.", when="restart"
    )
    name: str = _f(
        "node",
        "Node name (sim: prefix, nodes are NAME-0, NAME-1, ...).",
        when="restart",
        scope="local",
    )
    out_dir: str = _f(
        "",
        "Where metrics.jsonl, config.json and checkpoints go, one folder per node (empty = a new "
        "folder under the user's data folder; `sapo-edge runs` lists them).",
        when="restart",
        scope="local",
    )
    checkpoint_every: int = _f(
        10,
        "Save a checkpoint every this many rounds (0 = only at the end).",
        scope="local",
    )
    keep_checkpoints: int = _f(3, "Complete checkpoints kept per node.", scope="local")
    resume: bool = _f(
        False,
        "Continue from the newest complete checkpoint in out_dir (no --out-dir: the newest run "
        "of this node in the user's data folder).",
        when="restart",
        scope="local",
    )
    memory_check: bool = _f(
        True,
        "Estimate the memory a run needs before loading the model; refuse what cannot fit "
        "(--no-memory-check: try anyway).",
        scope="local",
    )
    nodes: int = _f(
        3,
        "sim only: number of nodes simulated on this machine.",
        command="sim",
        when="restart",
        scope="never",
    )
    node_backends: list = _f(
        [],
        "sim only: backends cycled over the nodes, e.g. torch,mlx (empty = all use backend).",
        command="sim",
        when="restart",
        scope="never",
    )

    hinted_nodes: list = _f(
        [],
        "sim only: the nodes (0, 1, ...) that see the worked example (format_example) in their "
        "prompts; the others never do. Empty: format_example decides for every node. With strict "
        "scoring the answer format is then a skill one node has and the others lack "
        "(experiments/aha.toml).",
        command="sim",
        scope="never",
    )
    hint_rounds: int = _f(
        0,
        "sim only: the hinted nodes stop (train and share nothing more) after this many rounds, "
        "so what they taught must pass on among the others; 0 = they run every round.",
        command="sim",
        scope="never",
    )

    hint: str = _f(
        "",
        "host only: who in the class sees the worked example (format_example): host (this "
        "laptop), a number K (the first K students to join), or both (host,2); the others "
        "never do. Empty: format_example decides for everyone (--preset aha: host).",
        command="host",
        scope="never",
    )

    # --- swarm network (run only) --------------------------------------------------------
    room: str = _f(
        "default",
        "Swarm room: only nodes in the same room find each other and exchange rollouts.",
        command="run",
        when="network",
        scope="never",
    )
    secret: str = _f(
        "",
        "Room key (sapo1-..., from `sapo-edge room new`) or a passphrase; empty = an open room. "
        "Better given as env SAPO_EDGE_SECRET or --secret-file: on the command line it shows in "
        "`ps`. Never sent, never saved.",
        command="run",
        when="network",
        scope="never",
    )
    secret_file: str = _f(
        "",
        "A file holding the room key or passphrase ('-' = ask for it at the prompt).",
        command="run",
        scope="never",
    )
    relay: str = _f(
        "",
        "Relay ws://HOST:PORT to reach nodes beyond the LAN, or a NATS server or cluster "
        "nats://HOST:4222 (tls://, or a comma list) for big swarms (empty = none).",
        command="run",
        when="network",
        scope="never",
    )
    max_inbound_groups: int = _f(
        128,
        "NATS relay: the most peer groups this node takes in per round, whatever the swarm's "
        "size (the room is sharded; see docs/scale.md).",
        command="run",
        scope="local",
    )
    mdns: bool = _f(
        True,
        "Find peers on the LAN with mDNS/zeroconf (--no-mdns: only --peer/--relay).",
        command="run",
        when="network",
        scope="local",
    )
    peer: list = _f(
        [],
        "A peer HOST:PORT to connect to (repeat the flag, or a,b).",
        command="run",
        when="network",
        scope="never",
    )
    listen: str = _f(
        "0.0.0.0:7744",
        "HOST:PORT this node's websocket listens on (port 0 = any free port).",
        command="run",
        when="network",
        scope="local",
    )
    solo: bool = _f(
        False,
        "Train alone: no network, no peers (J external samples find none).",
        command="run",
        when="network",
        scope="never",
    )

    def __post_init__(self) -> None:
        self.listen = normalise_listen(self.listen)
        if isinstance(self.peer, list):
            self.peer = [normalise_peer(p) for p in self.peer]
        self.relay = normalise_relay(self.relay)
        if isinstance(self.hinted_nodes, list):  # a flag gives "0,2" as text
            self.hinted_nodes = [
                int(k) if isinstance(k, str) and k.isdigit() else k for k in self.hinted_nodes
            ]
        self.validate()

    def validate(self) -> None:
        validate(self)

    def node_name(self, identity_name: str) -> str:
        """A networked node's name (run, join, host): --name when given, else its identity's."""
        return identity_name if self.name == DEFAULT_NAME else self.name

    def micro_batch(self, device: str) -> int:
        """micro_batch_size, or for 0 (auto) 1 on the CPU (torch's, MLX's), 4 on a GPU."""
        return self.micro_batch_size or (1 if device == "cpu" else 4)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> Config:
        """Settings from a table (a file's, the flags'): unknown names and wrong types refused."""
        return config_from_dict(cls, data, source)

    @classmethod
    def load(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
        """Defaults < preset < file < overrides (the CLI flags the user actually set)."""
        return cls.from_dict(*read_settings(path, overrides))

    def to_saved_dict(self) -> dict[str, Any]:
        """The settings as written to any file (config.json, checkpoints): no secrets."""
        data = self.to_dict()
        data.pop("secret", None)
        return data

    def save(self, path: Path) -> None:
        """Write the settings as JSON, leaving out secrets (the room secret)."""
        write_settings(path, self.to_saved_dict())

    def help(self, name: str) -> str:
        return next(f.metadata.get("help", "") for f in dataclasses.fields(self) if f.name == name)


DEFAULT_NAME = Config.__dataclass_fields__["name"].default  # "node": no --name given
