"""The `sapo-edge` command: the dashboard (no subcommand, or `run` in a terminal), `run --headless`
(one line per round; also when stdout is not a terminal), `sim` (N nodes here), `models`.

Every Config field is also a flag (--group-size 8, --no-lenient ...); flags beat --config FILE,
which beats the defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from .config import Config, ConfigError


def _add_config_flags(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "--config", metavar="FILE", help="TOML (or JSON) file of settings; flags override it."
    )
    for f in dataclasses.fields(Config):
        if f.metadata.get("command", command) != command:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", "")
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "bool":
            kw: dict[str, Any] = {"action": argparse.BooleanOptionalAction}
        elif kind == "list":
            kw = {
                "type": _csv,
                "action": "extend",
                "metavar": "A,B",
            }  # repeatable: --peer a --peer b
        elif f.name == "domains":
            kw = {"type": _domains, "metavar": "D1,D2[:W]"}
            help_ += " Flag form: comma list, optional :weight."
        elif kind == "dict":
            kw = {"type": _json_table, "metavar": "JSON"}
            help_ += " Flag form: a JSON object."
        else:
            kw = {"type": {"int": int, "float": float, "str": str}[kind], "metavar": f.name.upper()}
        p.add_argument(flag, dest=f.name, default=None, help=help_, **kw)


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _domains(text: str) -> dict[str, float]:
    out = {}
    for item in _csv(text):
        name, _, weight = item.partition(":")
        if not name.strip():
            raise argparse.ArgumentTypeError(
                f"{item!r} has no domain name: write NAME or NAME:WEIGHT"
            )
        try:
            out[name] = float(weight) if weight else 1.0
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"domain weight {weight!r} in {item!r} is not a number"
            ) from None
    return out


def _json_table(text: str) -> dict[str, Any]:
    example = """'{"basic_arithmetic": {"max_digits": 1}}'"""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({e}): write an object such as {example}"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object such as {example}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sapo-edge",
        description="Post-train small language models together with SAPO (Swarm sAmpling Policy Optimization).",
    )
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="train one node (this laptop)")
    run.add_argument(
        "--headless", action="store_true", help="print one line per round instead of the dashboard"
    )
    _add_config_flags(run, "run")
    sim = sub.add_parser(
        "sim", help="simulate N nodes on this machine and print the cumulative-reward table"
    )
    _add_config_flags(sim, "sim")
    ev = sub.add_parser(
        "eval",
        help="held-out pass@1 of the base model or a checkpoint (questions no node trains on)",
    )
    ev.add_argument("--questions", type=int, default=32, help="held-out questions (default 32)")
    ev.add_argument("--samples", type=int, default=4, help="completions per question (default 4)")
    ev.add_argument(
        "--checkpoint",
        default="",
        metavar="DIR",
        help="a round-NNNNNN folder or a node's output folder (newest checkpoint); "
        "empty = the base model",
    )
    ev.add_argument("--eval-seed", type=int, default=0, help="picks another held-out set")
    _add_config_flags(ev, "eval")
    sub.add_parser("models", help="list built-in model aliases and the model cache folder")
    room = sub.add_parser("room", help="`room new`: make a private room key to share")
    room.add_argument("action", choices=["new"], help="new: print a fresh 128-bit room key")
    relay = sub.add_parser(
        "relay", help="forward signed rollout batches among nodes that cannot see each other"
    )
    relay.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    relay.add_argument("--port", type=int, default=7745, help="port to listen on (default 7745)")
    relay.add_argument(
        "--max-messages-per-minute", type=int, default=120, help="per node (default 120)"
    )
    relay.add_argument("--max-connections-per-ip", type=int, default=16, help="default 16")
    relay.add_argument("--max-connections", type=int, default=1024, help="in total (default 1024)")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    names = {f.name for f in dataclasses.fields(Config)}
    overrides: dict[str, Any] = {
        k: v for k, v in vars(args).items() if k in names and v is not None
    }
    return Config.load(args.config, overrides)


def _resolve_secret(cfg: Config, argv: list[str]) -> Config:
    """Ask for the room secret now when --secret-file is '-' (before the dashboard owns the
    terminal), check a room key for typos, and warn about a secret given unsafely."""
    from .swarm.roomkey import code_to_key, looks_like_code, read_secret, secret_warnings

    if cfg.secret_file == "-":
        cfg = dataclasses.replace(cfg, secret=read_secret("", "-"), secret_file="")
    secret = read_secret(cfg.secret, cfg.secret_file)
    if looks_like_code(secret):
        code_to_key(secret)  # a typo fails here, with its remedy
    for warning in secret_warnings(argv, secret):
        print(f"sapo-edge: warning: {warning}", file=sys.stderr)
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and not sys.stdout.isatty():
        parser.print_help()  # a bare `sapo-edge` in a script or pipe explains itself
        return 0
    if not argv or (argv[0].startswith("--") and argv[0] != "--help"):
        argv.insert(0, "run")  # `sapo-edge [FLAGS]` is `sapo-edge run [FLAGS]`: the dashboard
    args = parser.parse_args(argv)
    try:
        if args.command == "models":
            from .models import ALIASES, cache_dir

            for alias, what in ALIASES.items():
                print(f"{alias:<16} {what}")
            print(f"cache: {cache_dir()}")
            return 0
        if args.command == "room":
            from .swarm.roomkey import SECRET_ENV, new_room_key

            code = new_room_key()
            print(code)
            print(
                f"Share it with the room's members (not on a public channel); each runs\n"
                f"  {SECRET_ENV}={code} sapo-edge run\n"
                "or saves it in a file and runs `sapo-edge run --secret-file FILE`.",
                file=sys.stderr,
            )
            return 0
        if args.command == "relay":
            from .swarm.relay import RelayLimits, run_relay

            if not 0 < args.port < 65536:
                raise ConfigError(f"--port {args.port}: use a port between 1 and 65535.")
            run_relay(
                args.host,
                args.port,
                RelayLimits(
                    messages_per_minute=args.max_messages_per_minute,
                    connections_per_ip=args.max_connections_per_ip,
                    connections_total=args.max_connections,
                ),
            )
            return 0
        cfg = config_from_args(args)
        if args.command == "run":
            cfg = _resolve_secret(cfg, argv)
        from . import runner  # heavy imports only once the flags are known to be good

        if args.command == "run":
            if not args.headless and sys.stdout.isatty():
                from .tui.app import run_dashboard

                return run_dashboard(cfg)
            return runner.run_headless(cfg)
        elif args.command == "sim":
            runner.run_sim(cfg)
        elif args.command == "eval":
            from .evaluate import evaluate

            result = evaluate(
                cfg,
                questions=args.questions,
                samples=args.samples,
                checkpoint=args.checkpoint,
                seed=args.eval_seed,
            )
            print(result.table())
        return 0
    except ConfigError as e:
        print(f"sapo-edge: config error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # ModelNotFound, TaskError, a checkpoint that does not fit...
        print(f"sapo-edge: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "sapo-edge: interrupted; the newest complete checkpoint is kept (--resume continues).",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
