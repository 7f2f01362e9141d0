"""The `sapo-edge` command: the dashboard (no subcommand, or `run` in a terminal), `run --headless`
(one line per round; also when stdout is not a terminal), `sim` (N nodes here), `eval`, `models`,
`runs`, `presets`, `doctor`, `relay`, `host` / `join` / `report` (a class: classroom/), `completion`.

Every Config field is also a flag (--group-size 8, --no-lenient ...); flags beat --config FILE
(default: config.toml in the user's config folder, when there is one), which beats --preset,
which beats the defaults. User errors are one sentence with the fix, exit status 2.
Here: main and the command table (COMMANDS); the parser is in parser.py, the small commands in tools.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import sys
from collections.abc import Callable
from pathlib import Path

from ..config.settings import Config, ConfigError, preset_names
from ..data.paths import NO_SPACE
from .parser import _first_run_choice, build_parser, config_from_args
from .tools import _doctor, _models, _relay, _room_nats_user

__all__ = ["build_parser", "config_from_args", "main"]  # the parser's, kept here for callers


def _room(args: argparse.Namespace, _parser: argparse.ArgumentParser, _argv: list[str]) -> int:
    if args.action == "nats-user":
        return _room_nats_user(args)
    from ..swarm.roomkey import SECRET_ENV, new_room_key

    code = new_room_key()
    print(code)
    print(
        f"Share it with the room's members (not on a public channel); each runs\n"
        f"  {SECRET_ENV}={code} sapo-edge run\n"
        "or saves it in a file and runs `sapo-edge run --secret-file FILE`.",
        file=sys.stderr,
    )
    return 0


def _completion(args: argparse.Namespace, parser: argparse.ArgumentParser, _argv: list[str]) -> int:
    from .completion import script

    print(script(parser, args.shell), end="")
    return 0


def _presets(_args: argparse.Namespace, _parser: argparse.ArgumentParser, _argv: list[str]) -> int:
    from ..config.presets import preset_summary

    for name in preset_names():
        print(f"{name:<12} {preset_summary(name)}")
    return 0


def _class(args: argparse.Namespace, _parser: argparse.ArgumentParser, argv: list[str]) -> int:
    from ..classroom import commands

    if args.command == "host":
        return commands.host_command(args, config_from_args, argv, view=_class_view)
    if args.command == "join":
        return commands.join_command(args, dashboard=_join_dashboard)
    return commands.report_command(args)


def _runs(args: argparse.Namespace, _parser: argparse.ArgumentParser, _argv: list[str]) -> int:
    from ..data.paths import runs_dir
    from ..run.runs import list_runs, runs_table

    root = Path(args.out_dir).expanduser() if args.out_dir else runs_dir()
    found = list_runs(root)
    print(runs_table(found) if found else f"no runs yet in {root}")
    return 0


def _training(args: argparse.Namespace, _parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """run (the dashboard, or headless), sim and eval: a Config from the flags, then the model."""
    cfg = config_from_args(args)  # bad flags fail here, before anything loads
    if args.command == "run" and (choice := _first_run_choice(args)):
        for key, value in choice.items():
            setattr(args, key, value)
        cfg = config_from_args(args)
    if args.command == "run":
        cfg = _resolve_secret(cfg, argv)
    if args.command in ("run", "sim"):
        from ..run.runs import prepare_out_dir

        cfg = prepare_out_dir(cfg, args.command)
    from ..run import runner  # heavy imports only once the flags are known to be good

    if args.command == "run":
        if not args.headless and sys.stdout.isatty():
            from ..tui.app import run_dashboard

            return run_dashboard(cfg)
        return runner.run_headless(cfg)
    if args.command == "sim":
        runner.run_sim(cfg)
        return 0
    from ..run.evaluate import evaluate

    result = evaluate(
        cfg,
        questions=args.questions,
        samples=args.samples,
        checkpoint=args.checkpoint,
        seed=args.eval_seed,
    )
    print(result.table())
    return 0


Command = Callable[[argparse.Namespace, argparse.ArgumentParser, list[str]], int]

# every subcommand and what runs it (tests/test_cli_table.py: the parser's and these agree)
COMMANDS: dict[str, Command] = {
    "run": _training,
    "sim": _training,
    "eval": _training,
    "models": lambda args, _p, _a: _models(args),
    "runs": _runs,
    "presets": _presets,
    "doctor": lambda args, _p, _a: _doctor(args),
    "relay": lambda args, _p, _a: _relay(args),
    "room": _room,
    "host": _class,
    "join": _class,
    "report": _class,
    "completion": _completion,
}


def _dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: list[str]) -> int:
    return COMMANDS[args.command](args, parser, argv)


def _os_error(e: OSError) -> str:
    where = f" {e.filename}" if e.filename else ""
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"permission denied on{where or ' a file'} ({e.strerror}): use a folder you can write to (--out-dir)."
    if e.errno in NO_SPACE:
        return f"no space left on the disk of{where or ' the output folder'}: free some space or pass --out-dir on another disk."
    return f"{e.strerror or e}{where}: check the path and try again."


def _resolve_secret(cfg: Config, argv: list[str]) -> Config:
    """Ask for the room secret now when --secret-file is '-' (before the dashboard owns the
    terminal), check a room key for typos, and warn about a secret given unsafely."""
    from ..swarm.roomkey import code_to_key, looks_like_code, read_secret, secret_warnings

    if cfg.secret_file == "-":
        cfg = dataclasses.replace(cfg, secret=read_secret("", "-"), secret_file="")
    secret = read_secret(cfg.secret, cfg.secret_file)
    if looks_like_code(secret):
        code_to_key(secret)  # a typo fails here, with its remedy
    for warning in secret_warnings(argv, secret):
        print(f"sapo-edge: warning: {warning}", file=sys.stderr)
    return cfg


def _class_view(host) -> int:
    """The teacher's class view (Textual, so imported only when shown)."""
    from ..tui.class_view import run_class_view

    return run_class_view(host)


def _join_dashboard(joined) -> int:
    """The student's dashboard (Textual, so imported only when shown)."""
    from ..tui.joined import run_join_dashboard

    return run_join_dashboard(joined)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and not sys.stdout.isatty():
        parser.print_help()  # a bare `sapo-edge` in a script or pipe explains itself
        return 0
    if not argv or (argv[0].startswith("--") and argv[0] not in ("--help", "--version")):
        argv.insert(0, "run")  # `sapo-edge [FLAGS]` is `sapo-edge run [FLAGS]`: the dashboard
    args, extras = parser.parse_known_args(argv)
    if extras:  # the subcommand's own usage and "did you mean" from its own flags
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        subs.choices.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return _dispatch(args, parser, argv)
    except ConfigError as e:
        print(f"sapo-edge: config error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # ModelNotFound, TaskError, a checkpoint that does not fit...
        print(f"sapo-edge: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a read-only or full disk, a busy port: a sentence, not a traceback
        print(f"sapo-edge: error: {_os_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "sapo-edge: interrupted; the newest complete checkpoint is kept (--resume continues).",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
