"""The small commands: `models` (list, --get, --clean the cache), `room nats-user`, `relay`
and `doctor`."""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from ..config.settings import Config, ConfigError
from .parser import user_config_file


def _models(args: argparse.Namespace) -> int:
    from ..data.paths import cache_dir, human_size
    from ..models.fetch import fetch_smollm2
    from ..models.resolve import ALIASES, cache_entries, clean_cache, smollm2_gguf

    if args.source and not args.get:
        raise ConfigError("--from FILE goes with --get smollm2-135m.")
    if args.get:
        fetch_smollm2(source=Path(args.source).expanduser() if args.source else None)
        return 0
    if args.clean:
        freed = clean_cache()
        print(
            f"removed {human_size(freed)} from {cache_dir()} (models are fetched and converted again when used)"
        )
        return 0
    for alias, what in ALIASES.items():
        state = "ready" if smollm2_gguf() else "not fetched: sapo-edge models --get " + alias
        print(f"{alias:<16} {what} [{state}]")
    entries = cache_entries()
    print(f"cache: {cache_dir()} ({human_size(sum(e.size for e in entries))} in all)")
    for e in entries:
        print(f"  {human_size(e.size):>9}  {e.kind:<9} {e.path}")
    if entries:
        print(
            "  (sapo-edge models --clean deletes them; Hugging Face downloads live in its own cache)"
        )
    return 0


def _room_nats_user(args: argparse.Namespace) -> int:
    from ..swarm.nats_room import nats_user_entry
    from ..swarm.roomkey import SECRET_ENV, read_secret, room_keys

    secret = read_secret("", args.secret_file)
    if not secret:
        raise ConfigError(
            f"no room key: run `{SECRET_ENV}=<the room key> sapo-edge room nats-user --user NAME` "
            "(`sapo-edge room new` makes a key)."
        )
    if not args.user:
        raise ConfigError("name the NATS user: sapo-edge room nats-user --user lab-3")
    try:
        entry = nats_user_entry(room_keys(args.room, secret).relay_id, args.user)
    except ValueError as e:
        raise ConfigError(f"--user {e}") from None
    print(entry)
    print(
        "Paste it into the users list of rooms.conf next to the NATS server's config "
        "(packaging/nats/), set the password variable it names in the server's environment, "
        "reload the server (nats-server --signal reload), and give the room's laptops "
        f"SAPO_EDGE_NATS_USER={args.user} and SAPO_EDGE_NATS_PASSWORD.",
        file=sys.stderr,
    )
    return 0


def _relay(args: argparse.Namespace) -> int:
    from ..swarm.relay import RelayLimits, run_relay

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: use a port between 1 and 65535.")
    if args.host in ("0.0.0.0", "::", ""):
        from ..run.doctor import lan_addresses

        for addr in lan_addresses()[:4]:
            host = f"[{addr}]" if ":" in addr else addr
            print(f"nodes join with: sapo-edge --relay {host}:{args.port}")
    try:
        run_relay(
            args.host,
            args.port,
            RelayLimits(
                messages_per_minute=args.max_messages_per_minute,
                connections_per_ip=args.max_connections_per_ip,
                connections_total=args.max_connections,
            ),
        )
    except OSError as e:
        if e.errno == errno.EADDRINUSE or "address already in use" in str(e).lower():
            raise ConfigError(
                f"port {args.port} on {args.host} is already in use (another relay?): stop it, "
                f"or pass --port {args.port + 1}."
            ) from None
        raise
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from ..run.doctor import main as doctor_main

    overrides = {k: v for k in ("relay", "listen", "backend") if (v := getattr(args, k))}
    path = args.config or user_config_file() or ""
    return doctor_main(Config.load(path, overrides), args.multicast_interface)
