"""The dashboard's time estimates (no screen): the first round's from decode speed and the token
budget, later rounds' from the last round's durations, corrected by live progress."""

import pytest

from sapo_edge.tui.eta import TRAIN_PER_GEN, RoundClock, duration
from sapo_edge.tui.messages import PhaseProgress, PhaseStarted, RoundDone


def _done(round_, gen_seconds, round_seconds):
    return RoundDone(round_, 0.1, None, {}, 100, gen_seconds, round_seconds, 0.0, 1.0, 1, 0, 0, 0)


def _gen_steps(clock, round_, start, steps, seconds_per_step, total=256):
    for s in range(1, steps + 1):
        at = start + s * seconds_per_step
        clock.add_progress(PhaseProgress(round_, "generating", s, total, 8 * s, 8, 0, at))
    return start + steps * seconds_per_step


def test_the_first_round_is_estimated_from_decode_speed_before_it_ends():
    clock = RoundClock()
    clock.start_phase(PhaseStarted(0, "sampling", 100.0, 100.0, None))
    clock.start_phase(PhaseStarted(0, "generating", 100.0, 100.0, None))
    assert clock.round_left(100.5) is None  # no decode step yet: nothing to go on
    now = _gen_steps(clock, 0, 100.0, 10, 0.5)  # 0.5 s per step, 10 of 256 steps
    gen_left = (256 - 10) * 0.5
    expected = gen_left + TRAIN_PER_GEN * (5.0 + gen_left)
    assert clock.round_left(now) == pytest.approx(expected)
    # 100 rounds: this one plus 99 more as long as this one is expected to take
    assert clock.run_left(now, 100) == pytest.approx(expected + 99 * (5.0 + expected))
    assert clock.tokens_per_second(now) == pytest.approx(80 / 5.0)


def test_training_progress_replaces_the_guess():
    clock = RoundClock()
    clock.start_phase(PhaseStarted(0, "generating", 0.0, 0.0, None))
    _gen_steps(clock, 0, 0.0, 4, 1.0, total=4)
    clock.start_phase(PhaseStarted(0, "training", 10.0, 0.0, None))  # generation took 10 s
    assert clock.round_left(11.0) == pytest.approx(TRAIN_PER_GEN * 10.0 - 1.0)
    clock.add_progress(PhaseProgress(0, "training", 1, 4, 0, 0, 0, 13.0))
    assert clock.round_left(13.0) == pytest.approx(3 * 3.0)  # 3 s per micro-batch, 3 left


def test_later_rounds_use_the_last_rounds_durations():
    clock = RoundClock()
    clock.round_done(_done(0, gen_seconds=40.0, round_seconds=60.0))
    clock.start_phase(PhaseStarted(1, "sampling", 200.0, 200.0, 60.0))
    assert clock.round_left(200.0) == 60.0
    clock.start_phase(PhaseStarted(1, "generating", 200.0, 200.0, 60.0))
    assert clock.round_left(201.0) == pytest.approx(59.0)  # prefill: the last round's length
    now = _gen_steps(clock, 1, 200.0, 10, 1.0)  # 10 s in, at 1 s per step
    # the last generation took 40 s: ~30 s of it left, then the last round's 20 s of training
    assert clock.round_left(now) == pytest.approx(30.0 + 20.0)
    assert clock.run_left(now, 5) == pytest.approx(50.0 + 3 * 60.0)
    # slower than last time: past 40 s the token budget's bound takes over
    late = _gen_steps(clock, 1, now, 35, 1.0)
    assert clock.round_left(late) == pytest.approx((256 - 35) * 1.0 + 20.0)


@pytest.mark.parametrize(
    "seconds, text", [(0, "0s"), (47.4, "47s"), (185, "3m 05s"), (9600, "2h 40m"), (-3, "0s")]
)
def test_durations_read_naturally(seconds, text):
    assert duration(seconds) == text
