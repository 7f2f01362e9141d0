"""What a class member tells the class as it goes (issue 48). A round's reward once its answers
are scored, before its train step: the trainer says it, the member's progress carries it
(signed, bounded), the board draws it on the member's curve and row until the round's figures
replace it, the student's own chart shows it. And its states by their names: paused, left,
done."""

from __future__ import annotations

import asyncio

import pytest
from scripted import make_cfg, make_node

from sapo_edge.classroom.board import ClassBoard
from sapo_edge.classroom.member import ClassMember
from sapo_edge.config.settings import Config
from sapo_edge.swarm.progress import Progress
from sapo_edge.swarm.protocol import ProtocolError
from sapo_edge.swarm.stats import RoundStats
from sapo_edge.swarm.transport import InProcessHub
from sapo_edge.tui.app import SapoDashboard
from sapo_edge.tui.messages import RoundDone, RoundScored
from sapo_edge.tui.widgets.reward_chart import RewardChart

A = "a" * 32


class Events:
    """A trainer callback that keeps what it is told, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_phase(self, _node, phase: str) -> None:
        self.seen.append(("phase", phase))

    def on_scored(self, node, reward: float) -> None:
        self.seen.append(("scored", node.round, reward))

    def on_round(self, r) -> None:
        self.seen.append(("round", r.round, r.reward_mean))

    def on_message(self, _node, _text) -> None:
        pass


def test_the_trainer_says_the_rounds_reward_before_its_train_step(tmp_path) -> None:
    node = make_node(make_cfg(tmp_path), "a", InProcessHub().connect("id-a"))
    events = node.callback = Events()
    report = node.run_round()
    seen = events.seen
    scored = seen.index(("scored", 0, report.reward_mean))
    assert scored < seen.index(("phase", "training")) < seen.index(("round", 0, report.reward_mean))


def test_a_members_progress_carries_the_reward_from_scoring_to_the_rounds_end(tmp_path) -> None:
    sent: list[Progress] = []
    node = make_node(make_cfg(tmp_path), "a", InProcessHub().connect("id-a"))
    member = ClassMember(Events(), None, progress=sent.append)
    node.callback = member
    report = node.run_round()
    rewards = {p.phase: p.reward for p in sent if p.round == 0}
    assert rewards["generating"] == -1.0  # not scored yet
    assert rewards["scoring"] == rewards["training"] == pytest.approx(report.reward_mean)


def test_progress_rewards_are_bounded_like_round_figures() -> None:
    ok = Progress("training", reward=0.5).to_json()
    assert Progress.from_json(ok).reward == 0.5
    for bad in (11.0, -0.5, float("nan"), "0.5", True):
        with pytest.raises(ProtocolError):
            Progress.from_json({**ok, "reward": bad})


def _stats(round_: int, reward: float) -> RoundStats:
    return RoundStats(
        round_, reward, shared=2, trained_local=1, trained_external=0, aha=0, learned={},
        name="ada", model="m", backend="torch", device="cpu",
    )  # fmt: skip


def test_the_board_draws_a_scored_round_until_its_figures_arrive() -> None:
    board = ClassBoard(None)
    board.record_progress(A, Progress("generating", round=0, name="ada"))
    assert board.snapshot().curves[A] == []
    board.record_progress(A, Progress("training", round=0, name="ada", reward=0.25))
    snap = board.snapshot()
    row = snap.members[0]
    assert snap.curves[A] == [(1, 0.25)] and snap.swarm_mean == [(1, 0.25)]
    assert row.rewards == [0.25] and row.recent_reward == 0.25 and row.rounds == 0
    board.record(A, _stats(0, 0.25))  # the round's figures: one point, now reported
    board.record_progress(A, Progress("training", round=1, name="ada", reward=0.5))
    snap = board.snapshot()
    assert snap.curves[A] == [(1, 0.25), (2, 0.5)] and snap.members[0].rounds == 1
    board.record_progress(A, Progress("stopped", round=1, name="ada"))  # stopped: not kept
    assert board.snapshot().curves[A] == [(1, 0.25)]


def test_the_students_chart_shows_the_reward_once_scored_and_keeps_one_point() -> None:
    app = SapoDashboard(Config(), start=False)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            chart = app.query_one(RewardChart)
            app.post_message(RoundScored(0, 0.25))
            await pilot.pause()
            assert chart.rounds == [1] and chart.rewards == [0.25]
            app.post_message(RoundDone(0, 0.25, None, {}, 10, 1.0, 2.0, 0.0, 1.0, 2, 2, 0, 4))
            await pilot.pause()
            assert chart.rounds == [1] and chart.rewards == [0.25]

    asyncio.run(drive())


def test_a_headless_run_says_its_first_rounds_reward_before_the_train_step(tmp_path) -> None:
    from sapo_edge.rl.metrics import PrintCallback

    lines: list[str] = []
    node = make_node(make_cfg(tmp_path), "a", InProcessHub().connect("id-a"))
    node.callback = PrintCallback(lines.append)
    first = node.run_round()
    node.run_round()
    assert lines[0] == f"       a round 1 scored: reward {first.reward_mean:.3f}, training"
    assert len(lines) == 3 and "scored" not in lines[1] + lines[2]


def test_a_member_says_paused_while_parked_and_left_or_done_at_the_end(tmp_path) -> None:
    """Issue 48, states by their names: the teacher's p showed 'round 11 · saving' for the
    whole pause, a student who quit 'round 15 · saving' then nothing. The loop tells the
    member's callback when it parks and how the run ended; the last word goes out at once."""
    import threading

    from sapo_edge.run.control import RunControl, run_rounds

    sent: list[Progress] = []
    last: list[Progress] = []
    node = make_node(make_cfg(tmp_path, rounds=3), "a", InProcessHub().connect("id-a"))
    node.callback = ClassMember(Events(), None, progress=sent.append, last_word=last.append)
    control = RunControl(paused=True)
    parked_ui: list[bool] = []
    control.on_park = parked_ui.append  # the dashboard's own hook stays
    worker = threading.Thread(target=run_rounds, args=(node, 3, control, lambda _m: None))
    worker.start()
    assert control.parked.wait(10)
    assert sent[-1].phase == "paused" and parked_ui == [True]
    control.request_stop()
    worker.join(10)
    assert [p.phase for p in last] == ["stopped"] and sent[-1].phase == "stopped"
    assert Progress.from_json(last[0].to_json()).describe() == "left"

    # seen in the class check: stopped after its answers were scored (the teacher's q), the
    # abandoned round's reward stayed on the chart with "left"
    sent.clear(), last.clear()
    control = RunControl()
    node.callback = ClassMember(Events(), None, progress=sent.append, last_word=last.append)
    node.callback.inner.on_phase = lambda _n, phase: phase == "training" and control.request_stop()
    run_rounds(node, 3, control, lambda _m: None)
    assert any(p.reward >= 0 for p in sent) and last[0].phase == "stopped"
    assert last[0].reward == -1.0

    sent.clear(), last.clear()  # a member whose rounds are all done
    node2 = make_node(make_cfg(tmp_path / "b", rounds=1), "b", InProcessHub().connect("id-b"))
    node2.callback = ClassMember(Events(), None, progress=sent.append, last_word=last.append)
    run_rounds(node2, 1, RunControl(), lambda _m: None)
    assert [p.phase for p in last] == ["done"] and last[0].describe() == "done after 1 round"


def test_the_hosts_own_row_paused_is_never_asleep() -> None:
    """Seen in the class check: the teacher's p left its own row 'asleep? not heard for 1m'
    (its progress reaches its own board once, not repeated as over the network)."""
    now = [1000.0]
    board = ClassBoard(None, host_id=A, clock=lambda: now[0])
    board.record_progress(A, Progress("paused", round=2, name="teacher"))
    now[0] += 600
    row = board.snapshot().members[0]
    assert row.is_host and row.state == "paused (round 3 next)" and row.last_seen == now[0]


def test_a_scored_reward_above_the_classs_is_not_drawn() -> None:
    """Like a round's figures (issue 44 #6), a scored round's reward above what the class can
    earn is counted and not drawn: a member cannot poison the chart with its progress."""
    board = ClassBoard(None, max_reward=1.0)
    board.record_progress(A, Progress("training", round=0, name="ada", reward=1.9))
    assert board.snapshot().curves[A] == [] and board.dropped["reward_out_of_range"] == 1
