"""How a setting marks a model a class gave (`hub:NAME`): resolved as a hub id or an alias only,
never as a path on this disk. Here, below the resolver (models/resolve.py) and the pace
estimates (machine/pace.py), which both read the mark."""

from __future__ import annotations

HUB_PREFIX = "hub:"  # a model a class gave: a hub id or an alias, never a path on this disk


def hub_only(name: str) -> str:
    """`name` marked to resolve as a hub id or alias only (see models.resolve.resolve_model)."""
    return name if name.startswith(HUB_PREFIX) else HUB_PREFIX + name


def model_name(name: str) -> str:
    """The name without the hub-only mark (what peers and the views are told)."""
    return name.removeprefix(HUB_PREFIX)
