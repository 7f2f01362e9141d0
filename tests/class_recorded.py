"""A recorded class for the class view's tests (snapshot, projector page, report): a host, two
students, a solo baseline and a member whose name is hostile markup, over eight rounds, then a
student who has just joined (loading its model: progress only), everyone but the host admitted
with the code, with a fixed clock, so pictures of it are stable."""

from __future__ import annotations

from pathlib import Path

from sapo_edge.classroom.board import ClassBoard
from sapo_edge.swarm.progress import Progress
from sapo_edge.swarm.stats import RoundStats

T0 = 1_800_000_000.0
CODE = "3-acorn-zinnia@192.168.1.20:7745"
HOST, ADA, BOB, SOLO, EVIL, CY = ("%032x" % (i + 1) for i in range(6))
HOSTILE = "<img src=x onerror=alert(1)>[b]x"  # must stay literal text everywhere
TASK = "basic_arithmetic · 4 questions x G=4 · I=2 J=2 · 48 tokens · smollm2-135m"


def recorded_board(path: Path | None = None) -> ClassBoard:
    clock = [T0]
    board = ClassBoard(
        path, host_id=HOST, received=lambda: {ADA: 28, BOB: 24, EVIL: 6}, clock=lambda: clock[0]
    )
    board.admissions_known = True  # the host admitted each of them with the code
    for i, node_id in enumerate((ADA, BOB, SOLO, EVIL, CY)):
        board.admit(node_id, f"192.168.1.{30 + i}")
    people = [
        (HOST, "teacher", "member", 0.10, 0.05),
        (ADA, "ada", "member", 0.15, 0.07),
        (BOB, "bob", "member", 0.05, 0.06),
        (SOLO, "solo", "baseline", 0.12, 0.02),
        (EVIL, HOSTILE, "member", 0.0, 0.0),
    ]
    for r in range(8):
        for node_id, name, role, start, step in people:
            if node_id == EVIL and r > 2:
                continue  # left after three rounds
            others = [p[0] for p in people if p[0] not in (node_id, SOLO)]
            learned = (
                {}
                if role == "baseline"
                else {others[(r + k) % len(others)]: (1, 1 if (r + k) % 3 else 0) for k in range(2)}
            )
            stats = RoundStats(
                round=r,
                reward=round(min(1.0, start + step * r), 3),
                shared=0 if role == "baseline" else 4,
                trained_local=4 if role == "baseline" else 2,
                trained_external=len(learned),
                aha=1 if node_id == BOB and r in (2, 5) else 0,
                learned=learned,
                name=name,
                model="HuggingFaceTB/SmolLM2-135M-Instruct",
                backend="mlx" if node_id == BOB else "torch",
                device="gpu" if node_id == BOB else "cpu",
                role=role,
            )
            clock[0] = T0 + 30 * r + 3
            board.record(node_id, stats)
    model = "HuggingFaceTB/SmolLM2-135M-Instruct"
    clock[0] = T0 + 30 * 8 - 2
    board.record_progress(ADA, Progress("generating", 8, 20, 30, 48, "ada", model, "torch", "cpu"))
    board.record_progress(CY, Progress("loading", 0, 20, 0, 0, "cy", model, "", ""))
    clock[0] = T0 + 30 * 8
    return board
