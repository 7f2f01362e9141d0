"""The adaptive CPU thread policy (sapo_edge/machine/threads.py) on a fake clock and a fake load."""

from __future__ import annotations

import time
from functools import partial

import pytest

from sapo_edge.backends.common import SharedBases
from sapo_edge.machine.threads import LoadSample, ThreadPolicy, pinned_threads


class FakeMachine:
    """`cores` cores; this process and the others each keep some of them busy over time."""

    def __init__(self, cores: int) -> None:
        self.cores, self.t, self.busy, self.own, self.samples = cores, 0.0, 0.0, 0.0, 0

    def run(self, seconds: float, *, mine: float, others: float) -> None:
        """`mine` and `others` in cores (busy time per second), for `seconds`."""
        self.t += seconds
        self.own += mine * seconds
        self.busy += min(mine + others, self.cores) * seconds

    def __call__(self) -> LoadSample:
        self.samples += 1
        return LoadSample(self.t, self.busy, self.own)


def policy_on(m: FakeMachine, **kw) -> ThreadPolicy:
    return ThreadPolicy(m.cores, m, clock=lambda: m.t, **kw)


def test_a_quiet_machine_keeps_every_core() -> None:
    m = FakeMachine(2)
    policy = policy_on(m)
    for _ in range(20):
        m.run(0.5, mine=2.0, others=0.05)
        assert policy.update() == 2


def test_one_busy_program_on_two_cores_leaves_one_thread_and_its_end_gives_the_core_back() -> None:
    m = FakeMachine(2)
    policy = policy_on(m)
    m.run(1.0, mine=1.0, others=1.0)  # our threads spin on what they get; the loop holds a core
    assert policy.update() == 1
    assert policy.others == pytest.approx(1.0)
    for _ in range(5):
        m.run(1.0, mine=1.0, others=1.0)
        assert policy.update() == 1
    seen = []
    for _ in range(3):  # the busy program ended: the core comes back after 3 quiet windows
        m.run(1.0, mine=1.0, others=0.0)
        seen.append(policy.update())
    assert seen == [1, 1, 2]


def test_it_samples_at_most_once_a_window_so_a_step_of_a_few_ms_costs_nothing() -> None:
    m = FakeMachine(2)
    policy = policy_on(m, min_interval=1.0)
    m.run(0.4, mine=1.0, others=1.0)
    for _ in range(50):  # fifty decode steps inside one window: the load is not even read
        assert policy.update() == 2
    assert m.samples == 1  # the first sample, when the policy was made
    m.run(0.7, mine=1.0, others=1.0)
    assert policy.update() == 1  # the 1.1 s window since the first sample


def test_a_flickering_light_load_does_not_flip_the_count() -> None:
    m = FakeMachine(2)
    policy = policy_on(m)
    seen = set()
    for load in [0.25, 0.3, 0.22, 0.28, 0.3, 0.25] * 3:  # a browser tab, around a quarter core
        m.run(1.0, mine=1.8, others=load)
        seen.add(policy.update())
    assert seen == {2}
    m.run(1.0, mine=1.0, others=0.6)
    assert policy.update() == 1
    seen = set()
    for load in [0.25, 0.3, 0.22, 0.28]:  # back to light, but inside the band: stay at 1
        m.run(1.0, mine=1.0, others=load)
        seen.add(policy.update())
    assert seen == {1}
    for _ in range(3):
        m.run(1.0, mine=1.0, others=0.1)
        policy.update()
    assert policy.threads == 2


@pytest.mark.parametrize("cores, low, high", [(2, 0.1, 0.5), (8, 2.0, 2.6)])
def test_a_load_wandering_around_the_band_changes_the_count_rarely(cores, low, high) -> None:
    """Ten minutes of a load wandering at random across the band: a handful of changes, not
    one every few seconds (a review's probe found 179 and 218 with the first band)."""
    import random

    rng = random.Random(cores)
    m = FakeMachine(cores)
    policy = policy_on(m)
    changes, last = 0, policy.threads
    for _ in range(600):
        m.run(1.0, mine=cores - high, others=rng.uniform(low, high))
        now = policy.update()
        changes += now != last
        last = now
    assert changes <= 20


def test_a_system_whose_load_cannot_be_read_keeps_its_count_and_says_why() -> None:
    m = FakeMachine(2)
    calls = []

    def flaky() -> LoadSample:
        calls.append(1)
        if len(calls) > 1:
            raise PermissionError("psutil: access denied")
        return m()

    policy = ThreadPolicy(2, flaky, clock=lambda: m.t)
    m.run(2.0, mine=1.0, others=1.0)
    assert policy.update() == 2 and not policy.adaptive
    assert "access denied" in policy.describe()
    m.run(2.0, mine=1.0, others=1.0)
    assert policy.update() == 2 and len(calls) == 2  # no more tries


@pytest.mark.parametrize(
    "cores, others, threads",
    [(8, 0.0, 8), (8, 3.0, 5), (8, 7.5, 1), (8, 12.0, 1), (4, 1.0, 3), (4, 1.5, 2), (1, 1.0, 1)],
)
def test_the_count_is_the_cores_the_others_leave_whole(cores, others, threads) -> None:
    m = FakeMachine(cores)
    policy = policy_on(m)
    m.run(2.0, mine=max(cores - others, 0.5), others=others)
    assert policy.update() == threads


def test_its_own_cpu_time_is_not_counted_as_others_load() -> None:
    m = FakeMachine(4)
    policy = policy_on(m)
    for _ in range(5):
        m.run(1.0, mine=4.0, others=0.0)  # all four cores busy, all of it ours
        assert policy.update() == 4


def test_a_pinned_count_never_samples_or_changes() -> None:
    def boom() -> LoadSample:
        raise AssertionError("a pinned policy sampled the load")

    policy = ThreadPolicy(2, boom, pinned=3)
    assert policy.update() == 3 and not policy.adaptive
    assert "pinned" in policy.describe()


def test_the_persons_choice_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert pinned_threads(0) is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert pinned_threads(0) == 1
    assert pinned_threads(3) == 3  # --threads over the environment
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert pinned_threads(0) is None
    from sapo_edge.machine.threads import usable_cores

    assert pinned_threads(10**6) == 4 * usable_cores()  # a typo cannot start a million threads


def test_the_real_meter_reads_this_process_and_the_cores() -> None:
    from sapo_edge.machine.threads import LoadMeter

    meter = LoadMeter()
    a = b = meter()
    deadline = time.monotonic() + 30
    # some CPU time of our own, many clock ticks of it: the process's counter and the cores'
    # counters are charged at different moments, so one tick (0.01 s) of our own may not yet
    # show in the cores' busy time (CI saw own +0.01, busy +0), while 0.3 s of it must
    while b.own - a.own < 0.3 and time.monotonic() < deadline:
        sum(i * i for i in range(200_000))
        b = meter()
    assert b.at > a.at and b.own - a.own >= 0.3
    assert b.busy - a.busy >= (b.own - a.own) * 0.5  # our own work shows in the cores' busy time


def test_niced_work_counts_only_where_niceness_gives_no_core_back(monkeypatch) -> None:
    import psutil

    from sapo_edge.machine import threads

    times = type("T", (), {"user": 1.0, "system": 1.0, "nice": 5.0, "steal": 0.5})()
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=True: [times])
    monkeypatch.setattr(threads, "_autogroup", lambda: False)
    monkeypatch.setattr(threads.os, "getpriority", lambda *_a: 0, raising=False)
    assert threads.LoadMeter(cores=[0])().busy == pytest.approx(2.5)  # nice left out
    monkeypatch.setattr(threads, "_autogroup", lambda: True)  # sessions share cores evenly
    assert threads.LoadMeter(cores=[0])().busy == pytest.approx(7.5)


def test_the_torch_backend_drops_a_thread_mid_generation_when_a_busy_program_starts(
    tiny_qwen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiring: the decode loop and the train step ask the policy at every step, and torch
    runs with what it answers; the count comes back when the other program ends."""
    import torch

    from sapo_edge.backends import cpu_threads
    from sapo_edge.backends.base import Sample
    from sapo_edge.backends.torch_backend import TorchBackend
    from sapo_edge.config.settings import Config

    machine = FakeMachine(2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads, "LoadMeter", lambda: machine)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(cpu_threads, "TORCH_DEFAULT", 2)
    monkeypatch.setattr(cpu_threads, "ThreadPolicy", partial(ThreadPolicy, clock=lambda: machine.t))
    before = torch.get_num_threads()
    said: list[str] = []
    try:
        cfg = Config(model=str(tiny_qwen), micro_batch_size=1)
        backend = TorchBackend(tiny_qwen, cfg, adapter="busy", device="cpu", log=said.append)
        backend.threads = cpu_threads.cpu_threads(0, said.append, fresh=True)
        assert torch.get_num_threads() == 2
        seen: list[int] = []

        def step(done: int, _tokens: int) -> None:
            seen.append(torch.get_num_threads())
            busy = 1.0 if done >= 3 else 0.0  # a busy loop starts at the third decode step
            machine.run(1.0, mine=2.0 - busy, others=busy)

        messages = [{"role": "user", "content": "Calculate 1 + 2."}]
        backend.generate([messages], 2, max_new_tokens=8, temperature=1.0, top_p=1.0,
                         seed=0, progress=step)  # fmt: skip
        assert seen[:4] == [2, 2, 2, 1] and any("1 of 2 threads" in m for m in said)
        for _ in range(3):  # it ended
            machine.run(1.0, mine=1.0, others=0.0)
            backend._pace()
        comp = backend.encode_completion(" 3", finished=True, max_new_tokens=8)
        seen.clear()
        backend.train_step(
            [Sample(messages, comp, 1.0), Sample(messages, comp, -1.0)],
            lambda k, n: seen.append(torch.get_num_threads()),
        )
        assert torch.get_num_threads() == 2
    finally:
        cpu_threads._POLICY = None
        torch.set_num_threads(before)


def test_a_pinned_process_policy_sets_torch_and_never_reads_the_load(monkeypatch) -> None:
    import torch

    from sapo_edge.backends import cpu_threads

    def no_meter():
        raise AssertionError("a pinned policy made a load meter")

    monkeypatch.setattr(cpu_threads, "LoadMeter", no_meter)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before, said = torch.get_num_threads(), []
    try:
        policy = cpu_threads.cpu_threads(0, said.append, fresh=True)
        assert policy.threads == 1 and not policy.adaptive and torch.get_num_threads() == 1
        assert said == ["cpu threads: 1 (pinned by --threads or OMP_NUM_THREADS)"]
    finally:
        cpu_threads._POLICY = None
        torch.set_num_threads(before)


def test_a_rounds_first_prefill_runs_with_the_cores_the_load_leaves_free(
    tiny_qwen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 48: a class's first round on a busy 2-core laptop ran its prefill and first decode
    step with both threads (47 s of a 90 s generation, 1 s a step after): the policy asked only
    after a step. It is made before the model loads (its first window spans the load) and asked
    before the prefill."""
    import torch

    from sapo_edge.backends import cpu_threads, torch_backend
    from sapo_edge.backends.torch_backend import TorchBackend
    from sapo_edge.config.settings import Config

    machine = FakeMachine(2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads, "LoadMeter", lambda: machine)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(cpu_threads, "TORCH_DEFAULT", 2)
    monkeypatch.setattr(cpu_threads, "ThreadPolicy", partial(ThreadPolicy, clock=lambda: machine.t))
    load = torch_backend.AutoModelForCausalLM.from_pretrained

    def loading(*a, **kw):  # the load takes 5 s while a busy program holds a core
        assert cpu_threads._POLICY is not None, "no policy while the model loads"
        machine.run(5.0, mine=1.0, others=1.0)
        return load(*a, **kw)

    monkeypatch.setattr(torch_backend.AutoModelForCausalLM, "from_pretrained", loading)
    monkeypatch.setattr(
        torch_backend, "_SHARED", SharedBases()
    )  # loaded here, not shared with a test before
    before = torch.get_num_threads()
    cpu_threads._POLICY = None
    try:
        cfg = Config(model=str(tiny_qwen))
        backend = TorchBackend(tiny_qwen, cfg, adapter="first", device="cpu", log=lambda _m: None)
        decoder, seen = torch_backend.GrowingDecoder, []

        def prefilling(*a, **kw):  # the decoder prefills the prompts as it is made
            seen.append(torch.get_num_threads())
            return decoder(*a, **kw)

        monkeypatch.setattr(torch_backend, "GrowingDecoder", prefilling)
        messages = [{"role": "user", "content": "Calculate 1 + 2."}]
        backend.generate([messages], 2, max_new_tokens=2, temperature=1.0, top_p=1.0, seed=0)
        assert seen == [1]
    finally:
        cpu_threads._POLICY = None
        torch.set_num_threads(before)
