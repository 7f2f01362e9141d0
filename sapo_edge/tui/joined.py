"""A student's dashboard (`sapo-edge join CODE` in a terminal): the node dashboard, training with
the class's settings; the header says which path carries it into the class, and a banner says
what to check when none does."""

from __future__ import annotations

import threading
from typing import Any

from ..classroom.join import Joined
from ..classroom.join_status import (
    CLASS_ENDED_TITLE,
    REMOVED_TITLE,
    PathWatcher,
    class_ended_remedy,
    follow_class,
    removed_remedy,
)
from .app import run_dashboard
from .messages import LogLine, PathChanged, Problem, ProblemCleared


def run_join_dashboard(joined: Joined) -> int:
    watchers: list[PathWatcher] = []
    done = threading.Event()  # all this laptop's rounds are done (its dashboard stays on)

    def run(cfg: Any, callback: Any, log: Any, control: Any) -> Any:
        from ..run.runner import run_single

        for note in joined.notes:
            log(f"room: {note}")
            callback.on_notice(cfg.name, f"room: {note}")

        def class_ended() -> None:  # on the network thread: a banner and a log line
            remedy = class_ended_remedy("q", done=done.is_set())
            callback.post(Problem(CLASS_ENDED_TITLE, remedy, fatal=False))
            callback.post(LogLine(f"{CLASS_ENDED_TITLE}: {remedy}"))

        def removed() -> None:  # on the network thread: a banner that stays, and a log line
            remedy = removed_remedy("q", joined.alone_command(headless=False))
            callback.post(Problem(REMOVED_TITLE, remedy, fatal=False))
            callback.post(LogLine(f"{REMOVED_TITLE}: {remedy}"))

        watcher = follow_class(  # and the network starts: seen while its model loads
            joined,
            say=lambda text: callback.on_message(cfg.name, text),
            warn=lambda title, remedy: callback.post(Problem(title, remedy, fatal=False)),
            clear=lambda title: callback.post(ProblemCleared(title)),
            ended=class_ended,
            removed=removed,
            on_path=lambda text: callback.post(PathChanged(text)),
        )
        watchers.append(watcher)
        node = run_single(cfg, joined.callback(callback), log, control, joined.session)
        if node.round >= cfg.rounds:  # every round done (not stopped, not failed)
            done.set()
        return node

    try:
        return run_dashboard(joined.cfg, run=run)
    finally:  # the student quit: it leaves the class's network, quietly after its summary
        for w in watchers:
            w.stop()
        joined.transport.log = lambda _m: None
        joined.transport.close()
