"""How long the class view's UI thread spends redrawing a class of N members (a benchmark, not a
test): the first draw, a member's new round, everyone's progress, the "seen" tick, and the same
class again (what the harness and an unchanged screen cost), each
timed on the UI thread (the handler and the screen's repaint: wall clock and the thread's CPU time), optionally
beside busy loops. Usage: `.venv/bin/python bench/class_view_redraw.py [--members 256]
[--busy 1] [--repeats 5] [--size 160x50]`; prints one line per kind of redraw (median and max).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from textual.screen import Screen  # noqa: E402
from textual.widgets import DataTable  # noqa: E402

from sapo_edge.classroom.board import ClassBoard  # noqa: E402
from sapo_edge.swarm.progress import Progress  # noqa: E402
from sapo_edge.swarm.stats import RoundStats  # noqa: E402
from sapo_edge.tui.class_view import ClassUpdated, ClassView  # noqa: E402

SUMMARY = "{n} members · 12 linked directly (12 lan), 200 via the relay · listening on :7744"


def stats(r: int, i: int, ids: list[str]) -> RoundStats:
    learned = {ids[(i + k) % len(ids)]: (1, k % 2) for k in range(1, 9)}
    return RoundStats(
        r,
        0.1 + 0.01 * (i % 50) + 0.02 * r,
        4,
        2,
        8,
        0,
        learned,
        f"student-{i}",
        "m",
        "torch",
        "cpu",
    )


def class_of(members: int, rounds: int) -> tuple[ClassBoard, list[str], list[float]]:
    ids = [f"{i:032x}" for i in range(members)]
    now = [1_800_000_000.0]
    board = ClassBoard(host_id=ids[0], clock=lambda: now[0], max_members=max(256, members))
    for r in range(rounds):
        now[0] += 30
        for i, me in enumerate(ids):
            board.record(me, stats(r, i, ids))
    return board, ids, now


BUSY = [0.0, 0]  # wall seconds the UI thread spent in the redraw's work (see timed), depth


def timed(cls: type, name: str) -> None:
    """Add the wall time of every outermost call of cls.name (sync or async) to BUSY."""
    inner = getattr(cls, name)

    def enter() -> float:
        BUSY[1] += 1
        return time.perf_counter()

    def leave(t0: float) -> None:
        BUSY[1] -= 1
        if not BUSY[1]:
            BUSY[0] += time.perf_counter() - t0

    if asyncio.iscoroutinefunction(inner):

        async def wrapper(*a, **kw):
            t0 = enter()
            try:
                return await inner(*a, **kw)
            finally:
                leave(t0)
    else:

        def wrapper(*a, **kw):
            t0 = enter()
            try:
                return inner(*a, **kw)
            finally:
                leave(t0)

    setattr(cls, name, wrapper)


async def measure(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    board, ids, now = class_of(args.members, args.rounds)
    summary = SUMMARY.format(n=args.members)
    for cls, name in (
        (ClassView, "on_class_updated"),
        (Screen, "_on_timer_update"),
        (Screen, "_refresh_layout"),
        (DataTable, "_on_idle"),
    ):
        timed(cls, name)
    app = ClassView(None, start=False)
    took: dict[str, list[tuple[float, float]]] = {}
    width, height = (int(x) for x in args.size.split("x"))

    async with app.run_test(size=(width, height)) as pilot:
        await pilot.pause()

        async def draw(kind: str) -> None:
            snap = board.snapshot()
            BUSY[0], c0 = 0.0, time.thread_time()
            app.on_class_updated(ClassUpdated(snap, summary))  # timed: the handler
            await pilot.pause()  # the work that follows (timed: layout, repaint, tables' idle)
            took.setdefault(kind, []).append((BUSY[0], time.thread_time() - c0))

        await draw("first draw")
        for k in range(args.repeats):
            now[0] += 1
            board.record(ids[k + 1], stats(args.rounds, k + 1, ids))
            await draw("one member's round")
            now[0] += 1
            for i, me in enumerate(ids):
                board.record_progress(
                    me, Progress("generating", args.rounds, 20, k + 1, 8, f"student-{i}", "m")
                )
            await draw("everyone's progress")
            now[0] += 10
            board.record_progress(ids[1], Progress("training", args.rounds, 20, 1, 4))
            await draw("the seen tick")
            await draw("nothing new (the floor)")
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=256)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--busy", type=int, default=1, help="busy loops beside it (default 1)")
    p.add_argument("--size", default="160x50", help="the terminal, COLUMNSxLINES")
    args = p.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)]
    try:
        took = asyncio.run(measure(args))
    finally:
        for b in busy:
            b.kill()
            b.wait()
    print(
        f"class view, {args.members} members x {args.rounds} rounds, {args.size}, "
        f"{args.busy} busy loop(s) beside; seconds on the UI thread (wall time of the redraw's work / the UI thread's CPU time, harness included)"
    )
    worst = 0.0
    for kind, xs in took.items():
        hs, ws = [h for h, _ in xs], [w for _, w in xs]
        worst = max(worst, *ws)
        print(
            f"  {kind:<22} median {statistics.median(hs):.3f} / {statistics.median(ws):.3f}"
            f"   max {max(hs):.3f} / {max(ws):.3f}   (n={len(xs)})"
        )
    print(f"  worst redraw {worst:.3f} s: {worst / 0.25:.2f}x the 0.25 s target")


if __name__ == "__main__":
    main()
