"""A room on a NATS server, as text: which --relay values name one (`nats://`, `tls://`, a comma
list of a cluster), the subjects a room's nodes use (its sharded tree, the class's stats, the
host's goodbye), the per-room user entry for nats-server's config (packaging/nats/rooms.conf),
and the credentials taken from the environment, never from the URL. The route that carries the
messages is nats_transport.py."""

from __future__ import annotations

import os
import re
import ssl
from urllib.parse import urlsplit

from .shards import room_subject

SCHEMES = ("nats", "tls")
CLASS_PREFIX = "sapo-class"  # members' stats: f"{CLASS_PREFIX}.{relay_id}", outside the tree
ENV_USER, ENV_PASSWORD, ENV_TOKEN, ENV_CA = (
    "SAPO_EDGE_NATS_USER",
    "SAPO_EDGE_NATS_PASSWORD",
    "SAPO_EDGE_NATS_TOKEN",
    "SAPO_EDGE_NATS_CA",
)


def is_nats_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def nats_servers(url: str) -> list[str]:
    """The server URLs in a --relay value: `nats://a:4222` or a comma list
    `nats://a:4222,nats://b:4222` (all nats:// or all tls://). ValueError says what to write."""
    servers = [u.strip() for u in url.split(",") if u.strip()]
    if not servers:
        raise ValueError("write nats://HOST:4222 (or tls://HOST:4222).")
    schemes = set()
    for s in servers:
        try:
            parts = urlsplit(s)
            port = parts.port
        except ValueError:
            raise ValueError(f"{s!r} is not HOST:PORT: write nats://HOST:4222.") from None
        if parts.scheme.lower() not in SCHEMES or not parts.hostname:
            raise ValueError(f"{s!r}: write nats://HOST:4222 or tls://HOST:4222.")
        if parts.username or parts.password:
            raise ValueError(
                f"{redact(s)!r} holds credentials, which would be saved and shown: set "
                f"{ENV_USER}/{ENV_PASSWORD} (or {ENV_TOKEN}) in the environment instead."
            )
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"{s!r}: a NATS URL is only scheme://HOST:PORT.")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"{s!r}: use a port between 1 and 65535.")
        schemes.add(parts.scheme.lower())
    if len(schemes) > 1:
        raise ValueError("mix of nats:// and tls:// servers: use tls:// for all of them.")
    return servers


def class_subject(relay_id: str) -> str:
    return f"{CLASS_PREFIX}.{relay_id}"


def end_subject(relay_id: str) -> str:
    """The host's goodbye (a signed progress "ended"): in the room's tree, so a per-room user
    may use it already, and no leaf (hex digits) is ever this subject."""
    return f"{room_subject(relay_id)}.end"


def room_subjects(relay_id: str) -> list[str]:
    """Every subject a room's nodes publish and subscribe to: its sharded tree and its class's
    stats subject (what a per-room NATS user must be allowed, and no more)."""
    return [f"{room_subject(relay_id)}.>", class_subject(relay_id)]


def nats_user_entry(relay_id: str, user: str) -> str:
    """A nats-server `users` entry that confines `user` to one room's subjects; its password
    comes from the server's environment (the variable is named in the entry)."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", user):
        raise ValueError(f"{user!r}: a NATS user name here is 1-32 of a-z, 0-9 and '-'.")
    var = "NATS_ROOM_" + user.upper().replace("-", "_") + "_PASSWORD"
    subjects = "[" + ", ".join(f'"{s}"' for s in room_subjects(relay_id)) + "]"
    return (
        f"  {{ user: {user}, password: ${var},\n"
        f"    permissions: {{ publish: {subjects},\n"
        f"                   subscribe: {subjects} }} }}"
    )


def redact(url: str) -> str:
    """The URL without any user:password@ part (for messages)."""
    scheme, sep, rest = url.partition("://")
    return scheme + sep + rest.rsplit("@", 1)[-1] if sep else url


def tls_context() -> ssl.SSLContext:
    ca = os.environ.get(ENV_CA, "")
    return ssl.create_default_context(cafile=ca or None)
