"""The `host`, `join` and `report` commands (cli/ parses, these run): the class view or one
line per event without a terminal, the student's dashboard or one line per round, the report.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config.checks import hint_plan
from ..config.settings import Config, ConfigError
from ..data.addresses import bind_address
from ..data.textsafe import clean
from .report import end_of_class
from .settings import LOCAL_FIELDS

CLASS_DEFAULT = {"preset": "addition", "model": "smollm2-135m"}
MAX_CLASS = 1024  # --max-members at most


def _say(text: str) -> None:
    try:
        print(text, flush=True)
    except (OSError, ValueError):
        pass  # the terminal is gone; the class goes on


# --------------------------------------------------------------------------------- host
def host_command(
    args: argparse.Namespace, cfg_from_args: Any, argv: list[str], *, view: Callable[[Any], int]
) -> int:
    """Host a class; on a terminal (not --headless) `view(host)` shows it (the CLI passes the
    class view from tui/, so classroom/ stays free of any UI)."""
    from ..run.runs import prepare_out_dir
    from .host import ClassHost, HostOptions

    if not (args.model or args.preset or args.config):
        for key, value in CLASS_DEFAULT.items():
            setattr(args, key, value)
        print(
            "sapo-edge: the class runs smollm2-135m on one-digit addition (--preset addition): "
            "every laptop can, and rewards move within minutes; --preset or --model choose "
            "another (--preset paper: the paper's 9 domains on Qwen2.5-0.5B).",
            file=sys.stderr,
        )
    cfg: Config = cfg_from_args(args)
    if cfg.secret or cfg.secret_file or any(a.startswith("--secret") for a in argv):
        raise ConfigError(
            "`host` makes a fresh room key for the class and hands it over with the join code: "
            "leave out --secret and --secret-file."
        )
    if cfg.solo:
        raise ConfigError("--solo and `host` do not go together: a class is a swarm.")
    if not args.train and (hint_plan(cfg.hint) or (False, 0))[0]:
        raise ConfigError(
            f"--hint {cfg.hint!r} gives the worked example to this laptop, which does not train "
            "(--no-train): give it to students instead, e.g. --hint 2."
        )
    if not 0 <= args.relay_port < 65536:
        raise ConfigError(f"--relay-port {args.relay_port}: use a port between 1 and 65535.")
    if not args.code_minutes > 0:
        raise ConfigError(f"--code-minutes {args.code_minutes}: use a positive number of minutes.")
    if not 2 <= args.max_members <= MAX_CLASS:
        raise ConfigError(
            f"--max-members {args.max_members}: use a class size between 2 and {MAX_CLASS} "
            "(this laptop included), e.g. --max-members 31 for 30 students."
        )
    try:
        web_host, web_port = bind_address(args.web, "")  # what the host will bind: [::1]:7746
    except ValueError:
        web_host, web_port = "", -1
    if not args.no_web and not (0 <= web_port < 65536 and _bindable(web_host)):
        raise ConfigError(
            f"--web {args.web!r}: write IP:PORT, e.g. 127.0.0.1:7746 (this laptop only) or "
            "0.0.0.0:7746 (the LAN too); an IPv6 address in brackets: [::1]:7746."
        )
    if args.address:
        from .code import CodeError, format_code, parse_code

        try:
            parse_code(format_code("1-acorn-acorn", args.address, 1))
        except CodeError:
            raise ConfigError(
                f"--address {args.address!r}: give the IP address or name students reach this "
                "laptop at, e.g. 192.168.1.20."
            ) from None
    if cfg.out_dir and (Path(cfg.out_dir).expanduser() / "class.jsonl").exists():
        raise ConfigError(
            f"{cfg.out_dir} holds a class already: pass another --out-dir (or none, for a new "
            "folder)."
        )
    cfg = prepare_out_dir(cfg, "host")
    if Path(cfg.model).expanduser().exists():
        print(
            f"sapo-edge: warning: the class's model is a file or folder on this laptop "
            f"({cfg.model}): students need their own copy (sapo-edge join CODE --model PATH).",
            file=sys.stderr,
        )
    web = "" if args.no_web else f"{web_host}:{web_port}"
    opts = HostOptions(
        address=args.address,
        relay_port=args.relay_port,
        web=web,
        train=args.train,
        code_minutes=args.code_minutes,
        max_members=args.max_members,
    )
    host = ClassHost(cfg, opts, log=_say).start()
    print(f"sapo-edge: the class's run folder: {cfg.out_dir}", file=sys.stderr)
    try:
        if not args.headless and sys.stdout.isatty():
            return view(host)
        return run_host_headless(host)
    finally:
        host.close()


def _bindable(host: str) -> bool:
    """An address the page can listen on: an IP literal or 'localhost' (a name would be looked
    up, and a typo fail later as an error about something else)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def run_host_headless(host: Any) -> int:
    """The class without a terminal UI: the code, then one line per member's round; Ctrl-C or
    SIGTERM stops this laptop's training (saved), ends the class and writes the report. A line
    on standard input `remove NAME` removes a member, `readmit NAME` lets it back."""
    from ..rl.metrics import PrintCallback
    from ..run.control import RunControl
    from ..run.stopping import exit_code, stop_signals
    from .removal import read_teacher_lines

    _print_code(host)
    _say("  (type `remove NAME` and Enter to remove a member from the class)")
    read_teacher_lines(host, sys.stdin, _say)
    lines = RoundLines(host.board, _say).start()
    control, ended = RunControl(), threading.Event()

    def on_signal(name: str) -> None:
        if ended.is_set():
            raise KeyboardInterrupt
        _say(f"\nsapo-edge: {name}: ending the class (this laptop saves its last round)")
        control.request_stop()
        ended.set()

    with stop_signals(on_signal) as received:
        try:
            if host.opts.train:
                host.train(PrintCallback(_say), _say, control)
                if not ended.is_set():
                    _say("this laptop's rounds are done; still hosting the class (Ctrl-C ends it)")
            ended.wait()
        except KeyboardInterrupt:
            pass
    lines.stop()
    received = host.received_counts()
    host.end(_say)
    end_of_class(host.out_dir, _say, received)
    return exit_code(received[0]) if received else 0


class RoundLines:
    """One line per member's new round, for a host without a terminal UI. The board calls
    on_change on the network loop for every record, so that only raises a flag: the board is
    read on a thread of its own, at most once every `every` seconds, however fast members report.
    """

    def __init__(self, board: Any, say: Any, every: float = 1.0) -> None:
        self.board, self.say, self.every = board, say, every
        self.shown: dict[str, tuple[int, int]] = {}
        self._dirty, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="class-lines", daemon=True)

    def start(self) -> RoundLines:
        self.board.on_change = self._dirty.set
        self._thread.start()
        return self

    def stop(self) -> None:
        self.board.on_change = None
        self._stop.set()
        self._dirty.set()
        self._thread.join(5.0)
        self.show_new()  # what came in since the last look

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            self.show_new()
            self._stop.wait(self.every)

    def show_new(self) -> None:
        snap = self.board.snapshot()
        for m in snap.members:
            if self.shown.get(m.node_id) != (m.rounds, m.last_round):
                self.shown[m.node_id] = (m.rounds, m.last_round)
                if not m.rounds:  # in the room, its first round under way
                    self.say(f"class: {clean(m.name, 24)} is in · {clean(m.state, 60)}")
                    continue
                reward = "-" if m.recent_reward is None else f"{m.recent_reward:.3f}"
                self.say(
                    f"class: {clean(m.name, 24)} round {m.last_round + 1} · reward (last 5) "
                    f"{reward} · used by others {m.used_by_others} · Aha {m.aha} · "
                    f"{len(snap.members)} members"
                )


def _print_code(host: Any) -> None:
    from .code import big_text

    words, _, where = host.code.partition("@")
    lines = [
        "",
        "Students join with:",
        *big_text(words),
        *big_text("@" + where),
        "",
        f"  sapo-edge join {host.code}",
        "",
        *("  " + line for line in host.code_lines()),
        f"  (the class: {host.task})",
    ]
    if host.page_url():
        lines.append(
            f"  projector page: {host.page_url()} (with the code: ?token={host.page_token})"
        )
    _say("\n".join(lines))


# --------------------------------------------------------------------------------- join
def join_command(args: argparse.Namespace, *, dashboard: Callable[[Any], int]) -> int:
    """Join a class; on a terminal (not --headless) `dashboard(joined)` shows it (the CLI
    passes the student's dashboard from tui/)."""
    from ..backends import select_backend
    from .join import join_class
    from .join_status import (
        CLASS_ENDED_TITLE,
        REMOVED_TITLE,
        class_ended_remedy,
        follow_class,
        removed_remedy,
        stay_until_the_end,
    )

    if not args.code:
        from .join import JoinError

        raise JoinError(
            "join needs the class's code: the teacher runs `sapo-edge host`, whose screen (and "
            "projector page) shows it in large letters. Type it as shown, e.g. "
            "sapo-edge join 7-acorn-zinnia@192.168.1.20:7745"
        )
    local = {k: v for k, v in vars(args).items() if k in LOCAL_FIELDS and v is not None}
    kind, device = select_backend(local.get("backend", "auto"), log=lambda _m: None)
    joined = join_class(
        args.code, local, baseline=args.baseline, device=device, kind=kind, log=_say
    )
    for note in joined.notes:
        print(f"sapo-edge: {note}", file=sys.stderr)
    if not args.headless and sys.stdout.isatty():
        return dashboard(joined)
    from ..run.runner import run_headless

    name, staying = joined.cfg.name, threading.Event()
    watcher = follow_class(
        joined,
        say=lambda text: _say(f"{name:>8} {text}"),
        warn=lambda title, remedy: _say(f"{name:>8} {title}: {remedy}"),
        clear=lambda title: _say(f"{name:>8} resolved: {title} (no longer holds)"),
        ended=lambda: _say(
            f"{name:>8} {CLASS_ENDED_TITLE}: "
            + class_ended_remedy("Ctrl-C", leaving=staying.is_set())
        ),
        removed=lambda: _say(
            f"{name:>8} {REMOVED_TITLE}: "
            + removed_remedy("Ctrl-C", joined.alone_command(headless=True))
        ),
    )
    try:
        code = run_headless(joined.cfg, session=joined.session, wrap=joined.callback)
        if code == 0 and not args.leave_when_done:
            code = stay_until_the_end(joined, lambda text: _say(f"{name:>8} {text}"), staying)
        return code
    finally:
        watcher.stop()
        joined.transport.log = lambda _m: None  # it leaves the class's network, quietly
        joined.transport.close()


# --------------------------------------------------------------------------------- report
def report_command(args: argparse.Namespace) -> int:
    from .report import write_report

    for path in write_report(Path(args.run_dir).expanduser()):
        print(path)
    return 0


def add_commands(sub: Any, add_config_flags: Any) -> None:
    """The host, join and report subcommands for cli/parser.py."""
    host = sub.add_parser(
        "host",
        help="teach a class: a room with a join code, a relay, the class view and a projector page",
        description="Start a class: a fresh room key and join code, a relay on this laptop, "
        "the room advertised on the LAN, and the class view. Students run `sapo-edge join "
        "CODE`; the settings below are the class's (with none: smollm2-135m on one-digit "
        "addition).",
    )
    host.add_argument("--headless", action="store_true", help="print lines instead of the view")
    host.add_argument(
        "--no-train",
        dest="train",
        action="store_false",
        help="only host (relay, view, page): this laptop does not train as a member",
    )
    host.add_argument(
        "--address",
        default="",
        metavar="HOST",
        help="the address students reach this laptop at, put in the code (default: its first "
        "LAN address)",
    )
    host.add_argument(
        "--relay-port",
        type=int,
        default=7745,
        help="the class's relay and admissions on this laptop (default 7745; --relay URL uses "
        "another relay instead, and admissions go to this node's port)",
    )
    host.add_argument(
        "--web",
        default="127.0.0.1:7746",
        metavar="HOST:PORT",
        help="the projector page (default 127.0.0.1:7746; 0.0.0.0:7746 shows it on the LAN, the "
        "join code only with the page token printed here)",
    )
    host.add_argument("--no-web", action="store_true", help="no projector page")
    host.add_argument(
        "--code-minutes",
        type=float,
        default=240.0,
        help="how long a join code is good for (default 240; n in the view makes a new one)",
    )
    host.add_argument(
        "--max-members",
        type=int,
        default=256,
        metavar="N",
        help="the class's size, this laptop included (default 256): the code admits no more, "
        "and the class view shows how many are in",
    )
    add_config_flags(host, "run", also="host")
    join = sub.add_parser(
        "join",
        help="join a class with the code the teacher shows",
        description="Join a class: everything comes from the code (the room key, the task, "
        "where the host is). Only this laptop's own settings can be given; without a flag the "
        "class's setting applies (the defaults shown are sapo-edge's own).",
    )
    join.add_argument(
        "code",
        nargs="?",  # without one, join says where it comes from (not argparse's "required")
        help="the join code on the teacher's screen, e.g. 7-acorn-zinnia@192.168.1.20:7745",
    )
    join.add_argument("--headless", action="store_true", help="one line per round, no dashboard")
    join.add_argument(
        "--leave-when-done",
        action="store_true",
        help="with --headless: leave the class once this laptop's rounds are done (by default "
        "it stays until the teacher ends the class)",
    )
    join.add_argument(
        "--baseline",
        action="store_true",
        help="train alone as the class's solo baseline (J=0, shares nothing; the class view "
        "draws it against the class's mean)",
    )
    add_config_flags(join, "join", only=LOCAL_FIELDS - {"resume"})
    report = sub.add_parser(
        "report", help="write a class's table (CSV, JSON) and plots (PNG) into its run folder"
    )
    report.add_argument("run_dir", metavar="RUN_DIR", help="the folder `sapo-edge host` wrote")
