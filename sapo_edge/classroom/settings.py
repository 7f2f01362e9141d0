"""What the teacher sets for the whole class and what each laptop keeps: the class's settings
travel to a student in the admission's sealed welcome (Grant.extra, JSON), are validated like any
config, and are checked against this laptop's memory before anything loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.loading import fields_where
from ..config.model_name import hub_only, model_name
from ..config.settings import Config, ConfigError
from ..data.safejson import JsonError, dumps_canonical, loads_strict
from ..data.textsafe import clean
from ..models.resolve import is_hub_name
from ..swarm.peerbook import is_node_id

INVITE_VERSION = 1
MAX_EXTRA_CHARS = 16 << 10  # = swarm.admission.MAX_EXTRA_CHARS (tested), without importing it
# What a class sends and what each laptop keeps, by each setting's `scope` (config/settings.py):
# a laptop's own (its hardware, folder, name, model: rollouts are text, models need not match),
# the room's and the host's business (never sent: the hint each student gets is its
# format_example, classroom/hint.py), the class's (everything else), and how long to train: sent
# as the class's, and a student's own flag still wins.
LOCAL_FIELDS = fields_where(Config, "scope", "local", "both")
_NOT_SENT = fields_where(Config, "scope", "never")
OVERRIDABLE = fields_where(Config, "scope", "both")
CLASS_FIELDS = (
    frozenset(f.name for f in dataclasses.fields(Config)) - (LOCAL_FIELDS - OVERRIDABLE) - _NOT_SENT
)


@dataclass(frozen=True)
class Invite:
    """What a student receives with the room key (Grant.extra)."""

    settings: dict[str, Any]  # the class's Config fields (CLASS_FIELDS and its model)
    node_port: int  # the host's own node listens here, on the code's address
    relay_port: int  # the host's relay on the code's address (0: none; Grant.relay names one)
    host_name: str  # the host's node name, for people
    host_id: str = ""  # the host's node id: whose signed "the class ended" students heed
    said_at: float = 0.0  # the host's clock as it wrote this welcome: its signed words about
    # members from before are not heeded (in force, they are said again; replayed, they lie)

    def to_text(self) -> str:
        text = dumps_canonical(
            {
                "v": INVITE_VERSION,
                "settings": self.settings,
                "node_port": self.node_port,
                "relay_port": self.relay_port,
                "host_name": self.host_name,
                "host_id": self.host_id,
                **({"said_at": self.said_at} if self.said_at else {}),
            }
        )
        if len(text) > MAX_EXTRA_CHARS:
            raise ConfigError(
                f"the class's settings are {len(text)} characters as JSON, over the "
                f"{MAX_EXTRA_CHARS} a join code can carry: use fewer domains or shorter configs."
            )
        return text


def make_invite(
    cfg: Config,
    node_port: int,
    relay_port: int,
    host_name: str,
    host_id: str = "",
    said_at: float = 0.0,
) -> Invite:
    settings = {k: v for k, v in cfg.to_dict().items() if k in CLASS_FIELDS}
    settings["model"] = cfg.model
    return Invite(settings, node_port, relay_port, host_name, host_id, said_at)


def read_invite(text: str) -> Invite:
    """Parse a host's invite strictly; ConfigError says what is wrong (a host of another version)."""
    try:
        obj = loads_strict(text, max_bytes=MAX_EXTRA_CHARS * 4, max_depth=8)
    except JsonError as e:
        raise ConfigError(f"the host's settings are not valid JSON ({e.reason}).") from None
    want = {"v", "settings", "node_port", "relay_port", "host_name", "host_id"}
    if not isinstance(obj, dict) or set(obj) - {"said_at"} != want:
        raise ConfigError(
            "the host sent settings this version of sapo-edge cannot read: use the same "
            "sapo-edge version as the teacher."
        )
    if obj["v"] != INVITE_VERSION:
        raise ConfigError(
            f"the host speaks class settings version {obj['v']!r}, this laptop "
            f"{INVITE_VERSION}: use the same sapo-edge version as the teacher."
        )
    ports = (obj["node_port"], obj["relay_port"])
    if not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < 65536 for p in ports):
        raise ConfigError("the host's settings name a port that is not one.")
    settings, name, host_id = obj["settings"], obj["host_name"], obj["host_id"]
    if not isinstance(settings, dict) or not isinstance(name, str):
        raise ConfigError("the host's settings are not a table of settings.")
    if not isinstance(host_id, str) or not (host_id == "" or is_node_id(host_id)):
        raise ConfigError("the host's settings name a host id that is not a node id.")
    unknown = sorted(k for k in settings if k not in CLASS_FIELDS | {"model"})
    if unknown:
        raise ConfigError(
            f"the host sets {', '.join(clean(k, 40) for k in unknown[:5])}, which a class may not "
            "set (or this version does not know): use the same sapo-edge version as the teacher."
        )
    said_at = obj.get("said_at", 0.0)
    if isinstance(said_at, bool) or not isinstance(said_at, int | float) or not said_at >= 0:
        raise ConfigError("the host's settings give a time that is not one.")
    ports = obj["node_port"], obj["relay_port"]
    return Invite(settings, *ports, clean(name, 40), host_id, float(said_at))


def class_config(invite: Invite, local: dict[str, Any]) -> Config:
    """This laptop's Config: the class's settings, then its own LOCAL_FIELDS; validated like any
    config (ConfigError names the setting and the fix)."""
    mine = {k: v for k, v in local.items() if k in LOCAL_FIELDS and v is not None}
    if "model" not in mine:  # the class's: a hub id or alias only, never a path on this disk
        model = invite.settings.get("model")
        if not isinstance(model, str) or not is_hub_name(model):
            shown = clean(model, 80) if isinstance(model, str) else "?"
            raise ConfigError(
                f"the class's model {shown!r} is not a model name this laptop can fetch (a folder "
                "on the teacher's laptop?): join with --model NAME_OR_PATH, e.g. --model "
                "smollm2-135m."
            )
        mine["model"] = hub_only(model)
    try:
        return Config.from_dict({**invite.settings, **mine}, source="the class's settings")
    except ConfigError as e:  # the host's values may be anything: one clean, short line
        raise ConfigError(
            f"{clean(str(e), 300)} (ask the teacher; this laptop may change --model, --rounds)"
        ) from None


def fit_here(cfg: Config, device: str) -> tuple[str, str]:
    """('ok' | 'warn' | 'refuse' | 'unknown', a sentence): will the class's settings fit this
    laptop? Known models and local folders are estimated before anything is fetched."""
    from ..machine.fit import (
        GB,
        KNOWN,
        check_fits,
        estimate_bytes,
        shape_from_config,
        system_memory,
    )

    name = model_name(cfg.model)
    local = name == cfg.model and Path(name).is_dir()  # a class's model: never this disk's
    shape = KNOWN.get(name) or (shape_from_config(Path(name)) if local else None)
    if shape is None:
        return "unknown", "the memory of this model is estimated once it is fetched"
    need, mem = estimate_bytes(shape, cfg, device), system_memory()
    verdict, _generic = check_fits(need, mem, name)
    have = (
        f"this laptop has {mem.total / GB:.1f} GB of {mem.where} ({mem.available / GB:.1f} GB free)"
    )
    if verdict == "refuse":
        return verdict, (
            f"the class's settings need about {need / GB:.1f} GB to train {name} and {have}: "
            "this laptop cannot run them. Join with a smaller model (sapo-edge join CODE --model "
            "smollm2-135m), or ask the teacher for a lighter task (smaller group size, questions "
            "per round or max new tokens); --no-memory-check tries anyway."
        )
    if verdict == "warn":
        return verdict, (
            f"the class's settings need about {need / GB:.1f} GB and {have}: close other programs, "
            "or expect this laptop to be slow."
        )
    return verdict, f"the class's settings need about {need / GB:.1f} GB; {have}"


def describe_task(settings: dict[str, Any]) -> str:
    """One line for people: 'basic_arithmetic · G=4 · I=2 J=2 · 48 tokens · smollm2-135m'."""
    domains = settings.get("domains") or {}
    names = ", ".join(clean(d, 30) for d in list(domains)[:3]) + (
        f" +{len(domains) - 3}" if len(domains) > 3 else ""
    )
    return (
        f"{names} · {settings.get('questions_per_round')} questions x G="
        f"{settings.get('group_size')} · I={settings.get('local_samples')} "
        f"J={settings.get('external_samples')} · {settings.get('max_new_tokens')} tokens · "
        f"{clean(settings.get('model', '?'), 60)}"
    )
