"""Issue 44's attacks on a class, over the wire (a host and students in this process, on
loopback, as tests/test_classroom.py runs them): a flood of admissions from one address, puppets
with a verified batch each filling the board, and claims poisoning the class's mean and baseline.
Each runs the attack and fails without the change that stops it."""

from __future__ import annotations

import asyncio

import pytest
from scripted import Quiet
from test_classroom import _NONE, _row, class_host, fast, linked, node_of, student

from sapo_edge.classroom.join import JoinError, join_class
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.stats import RoundStats


@pytest.fixture
def host(tmp_path):
    h = class_host(tmp_path)
    yield h
    h.close()


def test_a_flood_of_admissions_is_bounded_and_a_student_after_it_gets_a_row(tmp_path) -> None:
    """Issue 44 #2, over the wire: a student with the code ran 300 real admissions from one
    address, each with a fresh identity (10-24 a second): the code stayed live, "joining" rows
    filled the board, an honest student who came next got no row, and the teacher's log got
    300 "admitted" lines. Now one address has at most 16 admitted newcomers still to be heard
    from, a code admits the class's size and no more, the teacher sees the class's size, and
    rows that never did anything give way to a student who joins later."""
    import time

    from sapo_edge.classroom.board_seats import GRACE_S
    from sapo_edge.swarm.admission import AdmissionError, join

    lines: list[str] = []
    h = class_host(tmp_path, log=lines.append, max_members=12)  # 11 students
    try:
        words, _, where = h.code.partition("@")

        async def one(i: int) -> str:
            try:
                await join(where, words, timeout=60.0, who=(Identity.generate(), f"puppet{i}"))
                return "admitted"
            except AdmissionError as e:
                return e.reason
            except TimeoutError:
                return "timeout"

        async def flood() -> list[str]:
            """Waves of 6 at once (the relay's guard cuts more from one address) until the
            host says no for good."""
            got: list[str] = []
            while not {"no_such_code", "class_full"} & set(got) and len(got) < 120:
                got += await asyncio.gather(*(one(len(got) + i) for i in range(6)))
            return got

        got = asyncio.run(flood())
        assert got.count("admitted") == 11, got  # the class's size, then nothing
        assert set(got) <= {"admitted", "no_such_code", "class_full", "closed"}, got
        assert sum("admitted a newcomer" in line for line in lines) == 11
        assert any("used up" in line for line in lines)  # the view says to press n
        # 11 students and the host's own row (issue 48: there from its first second)
        assert len(h.board.members) == 12 and h.describe().startswith("12 of 12 members")
        assert h.live_code() == ""
        h.board.record(h.board.host_id, RoundStats(0, 0.5, 0, 0, 0, 0, {}, "t", "m", "t", "c"))
        h.new_code()  # the teacher's n: a student comes while the puppets' seats are held
        with pytest.raises(JoinError, match="full"):
            student(h, tmp_path, "early")
        later = time.time() + GRACE_S + 1  # two minutes on, the puppets never said a word
        h.board.clock = lambda: later
        ada = Identity.generate()
        j = student(h, tmp_path, "ada", ada)
        try:
            assert _row(h, ada.node_id).state == "joining"
            assert len(h.board.members) == 12 and h.board.dropped["evicted"] == 1
        finally:
            j.transport.close()
    finally:
        h.close()


def test_vouched_sock_puppets_cannot_lock_a_student_out(tmp_path) -> None:
    """Issue 44 #3, over the wire: puppets (with the room key) that each sent one valid batch
    and one stats message through the relay were all "checked" and filled the board; an honest
    student who shares batches and stats got no row, nor did one who only sends its progress.
    A member the host admitted always gets a row."""
    from swarm_util import connect, sealed

    from sapo_edge.swarm.batches import seal
    from sapo_edge.swarm.stats import make_stats

    h = class_host(tmp_path, max_members=8)
    try:
        keys = h.transport.keys
        relay = f"ws://127.0.0.1:{h.services.relay_port}"
        assert h.transport.wait_for(lambda: f"relay:{relay}" in h.transport.connected(), 10)
        puppets = [Identity.generate() for _ in range(8)]
        fake = RoundStats(0, 1.0, 2, 0, 0, 0, {}, "puppet", "m", "torch", "cpu")

        async def fill() -> None:
            c = await connect(relay, Identity.generate(), keys, relay=True)
            try:
                for p in puppets:
                    await c.send_sealed(sealed(p, keys))
                    await c.send_sealed(seal(keys, make_stats(p, keys, fake)[0]))
                assert await asyncio.to_thread(
                    h.transport.wait_for,
                    lambda: (
                        len(h.board.members) == 8
                        and all(h.received_counts().get(p.node_id, 0) > 0 for p in puppets)
                    ),
                    60,
                ), (h.board.dropped, h.transport.counters)
            finally:
                await c.close()

        asyncio.run(fill())
        assert len(h.board.members) == 8, (h.board.dropped, h.transport.counters)
        ada, solo = student(h, tmp_path, "ada"), student(h, tmp_path, "solo")
        node = node_of(ada.cfg, ada.transport, "ada", ada.callback(Quiet()))
        solo.transport.stats.progress_every, solo.transport.stats.progress_repeat = 0.05, 0.3
        ada.transport.start()
        solo.start_network()  # its progress only: no batch, no round yet
        try:
            linked(ada)
            node.run_round()  # shares its groups (the host verifies them), then its figures
            me = ada.transport.ident.node_id
            assert h.transport.wait_for(lambda: 0 in h.board.members.get(me, _NONE).rounds, 10)
            assert h.transport.wait_for(
                lambda: (
                    getattr(_row(h, solo.transport.ident.node_id), "state", "")
                    == "loading the model"
                ),
                10,
            )
            assert len(h.board.members) == 8 and h.board.dropped["evicted"] == 2
        finally:
            ada.transport.close()
            solo.transport.close()
    finally:
        h.close()


def test_claims_cannot_poison_the_class_mean_or_the_baseline(host, tmp_path) -> None:
    """Issue 44 #6: 80 identities that never sent a batch the host checked claimed reward 10.0
    as members and 0.0 as baselines: the class mean read 9.34 against a baseline of 0.01
    (honest: 0.50 and 0.50). A claim is bounded by the class's reward (1 + its format bonus;
    2.0 on the wire), and the class's mean is drawn from members whose groups the host
    verified, the baseline from baselines the host admitted; the claims stay in their rows."""
    from swarm_util import connect

    from sapo_edge.swarm.batches import seal
    from sapo_edge.swarm.stats import make_stats

    keys = host.transport.keys
    relay = f"ws://127.0.0.1:{host.services.relay_port}"
    assert host.transport.wait_for(lambda: f"relay:{relay}" in host.transport.connected(), 10)
    ada = student(host, tmp_path, "ada")
    solo = join_class(
        host.code,
        dict(out_dir=str(tmp_path / "solo"), name="solo", listen="127.0.0.1:0", mdns=False),
        baseline=True,
        identity=Identity.generate(),
        log=lambda _m: None,
    )
    fast(solo.transport)
    nodes = [node_of(j.cfg, j.transport, j.cfg.name, j.callback(Quiet())) for j in (ada, solo)]
    for j in (ada, solo):
        j.transport.start()
    try:
        linked(ada)
        for n in nodes:
            n.run_round()
        ids = [j.transport.ident.node_id for j in (ada, solo)]
        assert host.transport.wait_for(
            lambda: (
                all(0 in host.board.members.get(k, _NONE).rounds for k in ids)
                and host.received_counts().get(ids[0], 0) > 0
            ),  # ada's groups: verified here
            60,
        )
        honest = host.board.snapshot()
        mean, base = honest.swarm_mean, honest.baseline
        assert len(mean) == 1 and len(base) == 1  # ada's round, solo's round

        def claim(reward: float, role: str) -> bytes:
            fake = RoundStats(0, reward, 0, 0, 0, 0, {}, "fake", "m", "torch", "cpu", role)
            return seal(keys, make_stats(Identity.generate(), keys, fake)[0])

        async def lie() -> None:
            clients = [
                await connect(relay, Identity.generate(), keys, relay=True) for _ in range(2)
            ]
            counters = host.transport.counters
            base = counters["stats_delivered"]
            try:
                for i in range(80):
                    c = clients[i % 2]
                    await c.send_sealed(claim(1.0, "member"))  # the class's top: a claim
                    await c.send_sealed(claim(0.0, "baseline"))
                    if i % 20 == 0:
                        await c.send_sealed(claim(10.0, "member"))  # past any reward
                        await c.send_sealed(claim(1.5, "member"))  # past this class's
                    if i % 10 == 9:  # at the host's pace: a relay drops the oldest of a full
                        sent = base + 2 * (i + 1) + i // 20 + 1  # queue (a loaded machine)
                        assert await asyncio.to_thread(
                            host.transport.wait_for,
                            lambda s=sent: counters["stats_delivered"] >= s,
                            60,
                        ), counters
                assert await asyncio.to_thread(
                    host.transport.wait_for,
                    lambda: (
                        host.transport.counters["stats_delivered"] >= 2 + 160 + 4
                        and host.transport.counters["rejected:stats_bad_value"] >= 4
                    ),
                    60,
                ), host.transport.counters
            finally:
                for c in clients:
                    await c.close()

        asyncio.run(lie())
        snap = host.board.snapshot()
        assert snap.swarm_mean == mean and snap.baseline == base
        # the claims are in their rows, as claims; and the host's own (issue 48: from its start)
        assert len(snap.members) == 1 + 2 + 160
        assert host.transport.counters["rejected:stats_bad_value"] >= 4  # 10.0: refused
        assert host.board.dropped["reward_out_of_range"] == 4  # 1.5 with no format bonus
    finally:
        for j in (ada, solo):
            j.transport.close()
