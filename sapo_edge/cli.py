"""The `sapo-edge` command: `run --headless` (one node), `sim` (N nodes here), `models`.

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
        if f.name in ("nodes", "node_backends") and command != "sim":
            continue
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", "")
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "bool":
            p.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_
            )
        elif kind == "list":
            p.add_argument(flag, dest=f.name, type=_csv, default=None, metavar="A,B", help=help_)
        elif kind == "dict":
            if f.name == "domains":
                p.add_argument(
                    flag,
                    dest=f.name,
                    type=_domains,
                    default=None,
                    metavar="D1,D2[:W]",
                    help=help_ + " Flag form: comma list, optional :weight.",
                )
            else:
                p.add_argument(
                    flag,
                    dest=f.name,
                    type=_json_table,
                    default=None,
                    metavar="JSON",
                    help=help_ + " Flag form: a JSON object.",
                )
        else:
            p.add_argument(
                flag,
                dest=f.name,
                type={"int": int, "float": float, "str": str}[kind],
                default=None,
                metavar=f.name.upper(),
                help=help_,
            )


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
    sub.add_parser("models", help="list built-in model aliases and the model cache folder")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    names = {f.name for f in dataclasses.fields(Config)}
    overrides: dict[str, Any] = {
        k: v for k, v in vars(args).items() if k in names and v is not None
    }
    return Config.load(args.config, overrides)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "models":
            from .models import ALIASES, cache_dir

            for alias, what in ALIASES.items():
                print(f"{alias:<16} {what}")
            print(f"cache: {cache_dir()}")
            return 0
        cfg = config_from_args(args)
        from . import runner  # heavy imports only once the flags are known to be good

        if args.command == "run":
            if not args.headless:
                print("note: the dashboard is not part of this version yet; running headless.")
            runner.run_single(cfg)
        elif args.command == "sim":
            runner.run_sim(cfg)
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
