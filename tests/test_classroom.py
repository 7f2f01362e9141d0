"""A class on loopback, everyone in this process: a host and three students who joined by code
only (mDNS off: the code's address is all they have) train in rounds, find each other through
the host's address and its relay, train on each other's groups, and the host's board lists all
four with their figures; a wrong code is refused and learns nothing about the room; a student
that leaves and comes back keeps its row and its history.

The policy is the scripted one (tests/scripted.py: known right and wrong answers), so every
count below is certain; tests/test_classroom_cli.py runs the same on the tiny model."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

import pytest
from scripted import Quiet, ScriptedBackend, make_cfg

from sapo_edge.classroom.host import ClassHost, HostOptions
from sapo_edge.classroom.join import Joined, JoinError, join_class
from sapo_edge.classroom.join_status import class_path
from sapo_edge.rl.trainer import Node
from sapo_edge.swarm.identity import Identity

FAST_NET = dict(heartbeat=0.5, handshake_timeout=2.0, reconnect_base=0.05, reconnect_max=0.3)


def fast(transport):
    """Loopback timings (the defaults suit a classroom's Wi-Fi, not a test)."""
    return transport.tune(**FAST_NET)


def class_host(tmp_path: Path, log=lambda _m: None, **opts) -> ClassHost:
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False, rounds=10)
    where = dict(address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web="")
    h = ClassHost(cfg, HostOptions(**where, **opts), identity=Identity.generate(), log=log)
    h.start()
    fast(h.transport)
    return h


@pytest.fixture
def host(tmp_path: Path):
    h = class_host(tmp_path)
    yield h
    h.close()


def student(host: ClassHost, tmp_path: Path, name: str, ident: Identity | None = None) -> Joined:
    local = dict(out_dir=str(tmp_path / "students"), name=name, listen="127.0.0.1:0", mdns=False)
    joined = join_class(
        host.code, local, identity=ident or Identity.generate(), log=lambda _m: None
    )
    fast(joined.transport)
    return joined


def linked(j: Joined) -> None:
    """Wait until the host's address and its relay both carry this student."""
    assert j.transport.wait_for(
        lambda: (p := class_path(j)).host_address and p.relay_heard is not None, 10
    )


def node_of(cfg, transport, name: str, callback, right: int = 1) -> Node:
    return Node(
        cfg,
        ScriptedBackend(right),
        transport,
        node_id=transport.ident.node_id,
        name=name,
        model_id="scripted",
        out_dir=Path(cfg.out_dir) / name,
        callback=callback,
    )


def run_rounds_in_step(nodes: list[Node], host: ClassHost, rounds: int) -> None:
    """Each node runs a round; then wait until every node has everyone else's batch and the
    host's board has every node's figures, so the next round trains on them."""
    transports = [n.transport for n in nodes]
    for _ in range(rounds):
        before = [t.counters["delivered"] for t in transports]
        for n in nodes:
            n.run_round()
        for t, b in zip(transports, before, strict=True):
            want = b + len(nodes) - 1
            assert t.wait_for(lambda t=t, w=want: t.counters["delivered"] >= w, 10), t.describe()
        for n in nodes:
            assert host.transport.wait_for(
                lambda n=n: n.round - 1 in host.board.members.get(n.node_id, _NONE).rounds, 10
            ), f"{n.name}'s figures never reached the host"


class _NoRounds:
    rounds: dict = {}


_NONE = _NoRounds()


def test_a_class_joins_by_code_trains_on_each_other_and_the_board_shows_it(host, tmp_path):
    joined = [student(host, tmp_path, n) for n in ("ada", "bob", "cy")]
    for j in joined:
        assert j.cfg.group_size == host.cfg.group_size and j.cfg.domains == host.cfg.domains
        assert j.cfg.room == "class" and j.relay.startswith("ws://127.0.0.1:")
        assert j.cfg.secret == ""  # the key lives in the transport only, never in the config
    host_node = node_of(host.cfg, host.transport, "teacher", host.member_callback(Quiet()))
    students = [
        node_of(j.cfg, j.transport, j.cfg.name, j.callback(Quiet()), right=0 if i == 2 else 1)
        for i, j in enumerate(joined)
    ]
    for j in joined:
        j.transport.start()
    try:
        for j in joined:  # the host's address and its relay both carry each student
            linked(j)
        path = class_path(joined[0])
        assert path.ok and path.host_address.startswith("127.0.0.1:")
        assert path.describe().startswith("in the class via the host's address 127.0.0.1:")
        assert "the host's relay (" in path.describe()
        nodes = [host_node, *students]
        run_rounds_in_step(nodes, host, 3)

        snap = host.board.snapshot()
        rows = {r.node_id: r for r in snap.members}
        assert set(rows) == {n.node_id for n in nodes}
        assert snap.members[0].is_host and snap.members[0].name == "teacher"
        for n in nodes:
            row = rows[n.node_id]
            assert row.rounds == 3 and row.shared == 3 * host.cfg.questions_per_round
            if n is not students[2]:
                assert row.used_by_others > 0 and row.rewarded_by_others > 0
            learned = sum(snap.matrix.get(p, {}).get(n.node_id, (0, 0))[0] for p in rows)
            assert learned > 0, f"{row.name} trained on nobody's groups"
            if not row.is_host:
                assert row.received_here == 3 * host.cfg.questions_per_round  # verified here
        assert rows[students[2].node_id].aha > 0  # all of its own answers are wrong...
        assert rows[students[2].node_id].used_by_others == 0  # ...so its groups teach nobody
        assert rows[students[0].node_id].aha == 0  # it always has a right one itself
        assert [r for r, _ in snap.swarm_mean] == [1, 2, 3] and snap.baseline == []
        lines = (host.out_dir / "class.jsonl").read_text().splitlines()
        assert sum('"stats"' in line for line in lines) == 12  # and whom the host admitted:
        assert sum('"admitted"' in line for line in lines) == 3  # a baseline counts only then
        assert class_view_rows(host) == {
            ("teacher (host)", "3", "6"),
            ("ada", "3", "6"),
            ("bob", "3", "6"),
            ("cy", "3", "6"),
        }
    finally:
        for j in joined:
            j.transport.close()


def class_view_rows(host: ClassHost) -> set[tuple[str, str, str]]:
    """(member, rounds, shared) as the teacher's class view shows them."""
    import asyncio

    from sapo_edge.tui.class_view import ClassView
    from sapo_edge.tui.widgets.class_widgets import MembersTable

    app, rows = ClassView(host, start=False), set()

    async def look() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            table = app.query_one(MembersTable)
            labels = [str(c.label) for c in table.columns.values()]
            at = [labels.index(k) for k in ("member", "rounds", "shared")]
            for i in range(table.row_count):
                cells = table.get_row_at(i)
                rows.add((cells[at[0]].plain, str(cells[at[1]]), str(cells[at[2]])))

    asyncio.run(look())
    return rows


def test_a_wrong_code_is_refused_and_learns_nothing_about_the_room(host, tmp_path) -> None:
    words, _, where = host.code.partition("@")
    n, w1, w2 = words.split("-")
    wrong = f"{n}-{w2}-{w1}@{where}" if w1 != w2 else f"{n}-acorn-acorn@{where}"
    out = tmp_path / "students"
    with pytest.raises(JoinError) as e:
        join_class(wrong, dict(out_dir=str(out)), identity=Identity.generate(), log=print)
    message = str(e.value)
    assert "wrong code" in message and "teacher's screen" in message
    keys = host.transport.keys
    for secret in (keys.lan_id, keys.relay_id, host.admissions.grant.secret, "basic_arithmetic"):
        assert secret not in message
    assert not out.exists()  # nothing was set up for a room it never entered
    assert host.admissions.codes[n].failures == 1 and host.admissions.codes[n].admitted == 0
    # a typo in a word is caught here, before it costs one of the code's few tries
    with pytest.raises(ValueError, match="did you mean"):
        join_class(f"{n}-{w1}x-{w2}@{where}", {}, identity=Identity.generate())
    assert host.admissions.codes[n].failures == 1


def test_a_new_code_after_the_class_burned_one_lets_students_in(host, tmp_path) -> None:
    """Ten typos across a class retire the code; the teacher presses `n`: the new code admits
    (it used to answer no_such_code until the host restarted)."""
    words = host.code.partition("@")[0]
    n = words.split("-")[0]
    for i in range(10):  # ten laptops, one typo each
        ip = f"10.0.0.{i + 1}"
        host.admissions.end(host.admissions.begin(n, ip), False, ip)
    assert n not in host.admissions.codes
    host.new_code()
    assert host.code.partition("@")[0] != words
    joined = student(host, tmp_path, "ada")
    assert joined.transport.keys == host.transport.keys  # admitted: it holds the room key
    seen = []  # found by review: the old code went before the new one was shown, so a view
    real_revoke = host.admissions.revoke  # reading then said "no valid join code"

    def revoke(code: str) -> None:
        seen.append(host.live_code())
        real_revoke(code)

    host.admissions.revoke = revoke
    fresh = host.new_code()
    assert seen == [fresh]  # the new code is the one shown while the old one goes
    with pytest.raises(JoinError):  # the burned code stays dead
        join_class(f"{words}@{host.code.partition('@')[2]}", {}, identity=Identity.generate())


def test_a_student_who_leaves_and_comes_back_keeps_its_row_and_history(host, tmp_path) -> None:
    me = Identity.generate()
    host_node = node_of(host.cfg, host.transport, "teacher", host.member_callback(Quiet()))
    first = student(host, tmp_path, "ada", me)
    node = node_of(first.cfg, first.transport.start(), "ada", first.callback(Quiet()))
    linked(first)
    run_rounds_in_step([host_node, node], host, 2)
    node.save()
    first.transport.close()  # the laptop leaves (or sleeps)
    assert host.transport.wait_for(lambda: me.node_id not in host.transport.connected(), 10)
    host_node.run_round()  # the class goes on without it

    again = student(host, tmp_path, "ada", me)  # the same code, the same laptop
    assert again.cfg.resume and any("rejoining" in n for n in again.notes)
    back = node_of(again.cfg, again.transport.start(), "ada", again.callback(Quiet()))
    assert back.resume() and back.round == 2
    linked(again)
    run_rounds_in_step([host_node, back], host, 1)
    rows = [r for r in host.board.snapshot().members if r.node_id == me.node_id]
    assert len(rows) == 1 and rows[0].rounds == 3 and rows[0].last_round == 2
    assert [r for r, _ in host.board.snapshot().curves[me.node_id]] == [1, 2, 3]
    again.transport.close()


def test_class_settings_travel_with_the_key_and_local_flags_stay_local(host, tmp_path) -> None:
    j = student(host, tmp_path, "ada")
    assert j.invite.settings["model"] == "scripted" and "room" not in j.invite.settings
    assert j.cfg.local_samples == host.cfg.local_samples
    baseline = join_class(
        host.code,
        dict(out_dir=str(tmp_path / "b"), listen="127.0.0.1:0", mdns=False, rounds=3),
        baseline=True,
        identity=Identity.generate(),
        log=lambda _m: None,
    )
    assert baseline.role == "baseline" and baseline.cfg.rounds == 3
    assert baseline.cfg.external_samples == 0 and baseline.cfg.share == "none"
    assert baseline.cfg.local_samples == min(
        host.cfg.local_samples + host.cfg.external_samples, host.cfg.questions_per_round
    )
    assert dataclasses.replace(j.cfg, name="x").group_size == host.cfg.group_size


def test_with_mdns_students_also_find_each_other_on_the_lan(tmp_path) -> None:
    """Where multicast works, students link to each other directly (and the host's address
    and relay still carry them); the path shown says so."""
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=True)
    lo = ["127.0.0.1"]
    opts = HostOptions(
        address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web="", mdns_interfaces=lo
    )
    h = ClassHost(cfg, opts, identity=Identity.generate(), log=lambda _m: None).start()
    joined = []
    try:
        for name in ("ada", "bob"):
            local = dict(out_dir=str(tmp_path / "s"), name=name, listen="127.0.0.1:0", mdns=True)
            j = join_class(h.code, local, identity=Identity.generate(), mdns_interfaces=lo)
            joined.append(j)
            fast(j.transport).start()
        a, b = joined
        assert a.transport.wait_for(
            lambda: b.transport.ident.node_id in a.transport.connected(), 15
        )
        assert a.transport.wait_for(lambda: class_path(a).lan > 0, 15), class_path(a)
        assert "the host's relay" in class_path(a).describe()
    finally:
        for j in joined:
            j.transport.close()
        h.close()


def test_a_laptop_that_sleeps_rejoins_by_itself_and_its_rounds_catch_up(host, tmp_path) -> None:
    """Its network loop frozen (as in sleep), the host drops it; awake, it redials the host's
    address and relay by itself, and its next figures bring the round it ran offline."""
    import threading

    me = Identity.generate()
    host_node = node_of(host.cfg, host.transport, "teacher", host.member_callback(Quiet()))
    j = student(host, tmp_path, "ada", me)
    node = node_of(j.cfg, j.transport.start(), "ada", j.callback(Quiet()))
    linked(j)
    run_rounds_in_step([host_node, node], host, 1)
    asleep = threading.Event()
    j.transport._loop.call_soon_threadsafe(asleep.wait, 20)  # nothing moves on its network
    try:
        assert host.transport.wait_for(lambda: me.node_id not in host.transport.connected(), 10)
        node.run_round()  # round 1, run while its links are dead: its figures go nowhere
    finally:
        asleep.set()  # it wakes up
    linked(j)  # ...and is back in the class without anyone doing anything
    run_rounds_in_step([host_node, node], host, 1)  # round 2's message repeats round 1
    rounds = host.board.members[me.node_id].rounds
    assert sorted(rounds) == [0, 1, 2]
    j.transport.close()


def test_a_class_through_another_relay_admits_on_the_hosts_own_port(tmp_path) -> None:
    """`host --relay URL`: no relay here; the code names the host's node port, which serves the
    admissions, and students are handed the class's relay with the key."""
    from swarm_util import RelayThread

    relay = RelayThread()
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False, relay=relay.url)
    h = ClassHost(
        cfg,
        HostOptions(address="127.0.0.1", web=""),
        identity=Identity.generate(),
        log=lambda _m: None,
    ).start()
    try:
        assert h.services.relay is None and h.code.endswith(f"@127.0.0.1:{h.transport.port}")
        j = student(h, tmp_path, "ada")
        assert j.relay == relay.url and j.invite.relay_port == 0
        j.transport.start()
        assert j.transport.wait_for(lambda: f"relay:{relay.url}" in j.transport.connected(), 10)
        linked_host = h.transport.ident.node_id
        assert j.transport.wait_for(lambda: linked_host in j.transport.connected(), 10)
        j.transport.close()
    finally:
        h.close()
        relay.close()


def test_a_class_over_nats_carries_the_stats_through_it(tmp_path) -> None:
    """`host --relay nats://...`: the class's relay is a NATS server; admissions go to the
    host's node port, and a student with no direct link reaches the host's board through the
    class's stats subject, which only the host listens to (never counted in a shard budget)."""
    from nats_util import NatsServer, free_ports, require_binary

    from sapo_edge.swarm.stats import RoundStats

    port, monitor = free_ports(2)
    (tmp_path / "nats").mkdir()
    server = NatsServer(require_binary(), tmp_path / "nats", "n1", port, monitor).start()
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False, relay=server.url)
    opts = HostOptions(address="127.0.0.1", web="")
    h = ClassHost(cfg, opts, identity=Identity.generate(), log=lambda _m: None)
    joined = None
    try:
        h.start()
        got = []
        h.transport.intake.stats.on_stats = lambda v: (got.append(v), h.board.on_stats(v))
        assert h.transport.nats.classnet.want_stats  # the host hears the stats subject
        assert h.transport.wait_for(lambda: h.transport.nats.classnet.stats_listening, 10)
        j = joined = student(h, tmp_path, "ada")
        assert j.relay == server.url and not j.transport.nats.classnet.want_stats  # students do not
        j.transport.manual = []  # no direct link to the host: NATS only
        j.transport.start()
        assert j.transport.wait_for(lambda: j.transport.nats.up, 10), j.transport.describe()
        j.transport.stats.publish_stats(
            [RoundStats(0, 0.5, 2, 2, 0, 0, {}, "ada", "m", "torch", "cpu")]
        )
        assert h.transport.wait_for(lambda: bool(got), 10), h.transport.counters
        assert got[0].route.startswith("relay:nats://")
        assert h.board.snapshot().members[-1].name == "ada"
        assert h.transport.counters["nats_stats_in"] >= 1
    finally:
        if joined is not None:
            joined.transport.close()
        h.close()
        server.stop()


def test_over_nats_the_hosts_goodbye_reaches_a_student_with_no_other_path(tmp_path) -> None:
    """Issue 28: the goodbye went on every path but NATS. A student whose only path is the NATS
    server is told the class ended; junk and an oversized message on the end subject (anyone
    with publish rights can send them) are counted, never heeded."""
    import nats
    from nats_util import NatsServer, free_ports, require_binary

    port, monitor = free_ports(2)
    (tmp_path / "nats").mkdir()
    server = NatsServer(require_binary(), tmp_path / "nats", "n1", port, monitor).start()
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False, relay=server.url)
    h = ClassHost(cfg, HostOptions(address="127.0.0.1", web=""), identity=Identity.generate())
    h.log.fallback = lambda _m: None
    joined = None
    try:
        h.start()
        j = joined = student(h, tmp_path, "ada")
        j.transport.manual = []  # no direct link to the host: NATS only
        j.transport.start()
        nr = j.transport.nats
        assert j.transport.wait_for(lambda: nr.up and nr.classnet.end_listening, 10), (
            j.transport.describe()
        )
        assert h.transport.wait_for(lambda: h.transport.nats.up, 10)

        async def attack() -> None:
            nc = await nats.connect(server.url)
            await nc.publish(nr.classnet.end_subject, b"junk")
            await nc.publish(nr.classnet.end_subject, b"x" * (100 << 10))  # opened by nobody
            await nc.publish(nr.classnet.end_subject, b"x" * (1 << 20))  # over the queue's bytes
            await nc.flush()
            await nc.close()

        nr.junk_bytes_per_s = 1  # the route's junk cap, tiny: after the first, all is shed
        asyncio.run(attack())
        assert j.transport.wait_for(lambda: j.transport.counters["nats_end_in"] >= 2, 10), (
            j.transport.counters
        )
        assert j.transport.counters["nats_junk_shed"] >= 1
        nr.junk_bytes_per_s = 16 << 20
        assert not j.class_ended.is_set()
        said = []
        h.end(said.append)
        assert j.class_ended.wait(10)
        assert said and said[0].startswith("told the class it ended (1 link)")
    finally:
        if joined is not None:
            joined.transport.close()
        h.close()
        server.stop()


class _HoldTraining(Quiet):
    """Holds its round at the training phase until `go` is set (bounded), so the test can look
    at the class while the round is under way."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def on_phase(self, node, phase) -> None:
        if phase == "training":
            self.go.wait(20)


def _row(host: ClassHost, node_id: str):
    return next((m for m in host.board.snapshot().members if m.node_id == node_id), None)


def test_a_student_has_a_row_from_the_start_that_says_what_it_is_doing(host, tmp_path) -> None:
    """Issue 28: the board showed nobody until a member's first round ended (minutes on a busy
    laptop). From the moment its network starts (before its model loads) a student has a row
    that says what it is doing, from its signed progress messages; the header counts it on the
    path that carries it."""
    # issue 48: the host (it trains) has its row from the first second, not after its model
    assert [(m.is_host, m.state) for m in host.board.snapshot().members] == [
        (True, "loading the model")
    ]
    j = student(host, tmp_path, "ada")
    j.transport.stats.progress_every, j.transport.stats.progress_repeat = 0.05, 0.3
    me = j.transport.ident.node_id
    j.start_network()  # what `join` does before loading the model
    try:
        assert host.transport.wait_for(
            lambda: getattr(_row(host, me), "state", "") == "loading the model", 10
        ), host.board.snapshot().members
        row = _row(host, me)
        assert row.name == "ada" and row.rounds == 0 and row.recent_reward is None
        assert row.model == "scripted"  # the class's model by its name, not "hub:scripted"
        linked(j)
        assert host.describe().startswith(
            "2 of 256 members · 1 linked directly (1 manual), 0 via the relay"
        )
        # the student's header: the host, linked directly, is not "0 nodes heard" on the relay
        assert "1 peer connected (1 manual); relay up, 0 more heard through it" in (
            j.transport.describe()
        )
        inner = _HoldTraining()
        node = node_of(j.cfg, j.transport, "ada", j.callback(inner))
        worker = threading.Thread(target=node.run_round, daemon=True)
        worker.start()
        try:  # its first round is under way: the row says so
            assert host.transport.wait_for(
                lambda: getattr(_row(host, me), "state", "") == "round 1 · training", 10
            ), _row(host, me)
            assert _row(host, me).rounds == 0
        finally:
            inner.go.set()
            worker.join(30)
        assert host.transport.wait_for(
            lambda: (
                getattr(_row(host, me), "state", "").startswith("round 1 done")
                or getattr(_row(host, me), "rounds", 0) == 1
            ),
            10,
        )
        assert host.transport.counters["progress_delivered"] >= 2
        assert not any(k.startswith("rejected:stats_") for k in host.transport.counters)
    finally:
        j.transport.close()


def test_a_student_has_a_row_from_admission_on(host, tmp_path) -> None:
    """Issue 28: a row appeared only once a student's network had started and its progress
    reached the host; a laptop admitted but reaching the class by no path never showed. The
    joiner says who it is in its admission (boxed under the code's key): its row says "joining"
    at once, and its own signed progress takes over."""
    ident = Identity.generate()
    j = student(host, tmp_path, "ada", ident)
    row = _row(host, ident.node_id)
    assert row is not None and row.state == "joining" and row.rounds == 0 and row.name == "ada"
    j.transport.stats.progress_every, j.transport.stats.progress_repeat = 0.05, 0.3
    j.start_network()
    try:
        assert host.transport.wait_for(
            lambda: getattr(_row(host, ident.node_id), "state", "") == "loading the model", 10
        )
    finally:
        j.transport.close()


def test_a_joiners_word_about_who_it_is_must_open_under_the_codes_key(host) -> None:
    """Only a code holder's box adds a row, and only for its own identity: a box sealed under
    another key, or naming a key it holds no signature of (a classmate's), is ignored (the
    admission itself stands on the code); nobody names the host's own row."""
    from sapo_edge.swarm import admission

    key, ada, bob = b"k" * 32, Identity.generate(), Identity.generate()
    assert admission._who(key, admission._who_box(key, ada, "ada")) == (ada.node_id, "ada")
    assert admission._who(key, admission._who_box(b"x" * 32, ada, "ada")) is None
    assert admission._who(key, "zz") is None and admission._who(key, "") is None
    # a signature from another admission (another SPAKE2 key) proves nothing here
    import json

    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    def reseal(box_key: bytes, fields: dict) -> str:
        plain = json.dumps(fields).encode()
        aead = ChaCha20Poly1305(admission._box_key(box_key, admission._WHO_KEY))
        return (b"n" * 12 + aead.encrypt(b"n" * 12, plain, b"who")).hex()

    def opened(box_key: bytes, hex_box: str) -> dict:
        box = bytes.fromhex(hex_box)
        aead = ChaCha20Poly1305(admission._box_key(box_key, admission._WHO_KEY))
        return json.loads(aead.decrypt(box[:12], box[12:], b"who"))

    elsewhere = opened(b"y" * 32, admission._who_box(b"y" * 32, ada, "ada"))
    assert admission._who(key, reseal(key, elsewhere)) is None
    # bob speaks for ada's row: ada's key, bob's signature
    spoof = opened(key, admission._who_box(key, bob, "mallory"))
    spoof["key"] = ada.public_key.hex()
    assert admission._who(key, reseal(key, spoof)) is None
    before = len(host.board.members)
    host._admitted(host.board.host_id, "impostor")
    assert len(host.board.members) == before
    host._admitted("b" * 32, "x\x1b[31m\u202ey")  # a hostile joiner's name: text only
    assert _row(host, "b" * 32).name.isprintable()


def test_a_classmate_with_the_code_cannot_relabel_another_students_row(host, tmp_path) -> None:
    """Found by review: the node id in the admission was the joiner's word alone, so anyone
    with the code could rename a classmate's row (and make a baseline a member) until its next
    progress. Now a joiner speaks only for the key it signs with."""
    from sapo_edge.swarm import admission
    from sapo_edge.swarm.admission import join_room

    bob = Identity.generate()
    j = student(host, tmp_path, "bob", bob)
    assert _row(host, bob.node_id).name == "bob"
    real_box = admission._who_box

    def speak_for_bob(key, ident, name):  # mallory's client: bob's key, her own signature
        import json

        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        aead = ChaCha20Poly1305(admission._box_key(key, admission._WHO_KEY))
        box = bytes.fromhex(real_box(key, ident, "mallory"))
        fields = json.loads(aead.decrypt(box[:12], box[12:], b"who"))
        fields["key"] = bob.public_key.hex()
        return (b"n" * 12 + aead.encrypt(b"n" * 12, json.dumps(fields).encode(), b"who")).hex()

    admission._who_box = speak_for_bob
    try:
        words, _, where = host.code.partition("@")
        join_room(where, words, who=(Identity.generate(), "mallory"))  # admitted: she has the code
    finally:
        admission._who_box = real_box
    assert _row(host, bob.node_id).name == "bob"
    assert not any(m.name == "mallory" for m in host.board.snapshot().members)
    j.transport.close()


def test_a_joiner_of_an_earlier_version_is_still_admitted(host) -> None:
    """Found by review: `who` became a required field of the confirm message, so a joiner that
    sent none (an earlier version) failed, and each try counted against the teacher's code."""
    from sapo_edge.swarm import admission
    from sapo_edge.swarm.admission import join_room

    real_msg = admission._msg

    def old_msg(kind, **fields):
        fields.pop("who", None)
        return real_msg(kind, **fields)

    admission._msg = old_msg
    try:
        words, _, where = host.code.partition("@")
        grant = join_room(where, words)
    finally:
        admission._msg = real_msg
    assert grant.secret == host.admissions.grant.secret
    n = words.split("-")[0]
    assert host.admissions.codes[n].failures == 0


def test_a_flood_of_fresh_identities_cannot_keep_a_later_student_off_the_board(
    host, tmp_path
) -> None:
    """Issue 31 #2: with the code, anyone can sign stats under fresh identities; 256 of them
    through the host's relay filled the board (first come, first served) and every later student
    was verified but never shown (board_full). A student whose groups the host verified takes
    the row of a member the host never verified anything from."""
    import asyncio

    from swarm_util import connect

    from sapo_edge.swarm.batches import seal
    from sapo_edge.swarm.stats import RoundStats, make_stats

    keys = host.transport.keys
    relay = f"ws://127.0.0.1:{host.services.relay_port}"
    assert host.transport.wait_for(lambda: f"relay:{relay}" in host.transport.connected(), 10)
    fake = RoundStats(0, 1.0, 0, 0, 0, 0, {}, "fake", "m", "torch", "cpu")

    async def flood() -> None:
        clients = [await connect(relay, Identity.generate(), keys, relay=True) for _ in range(3)]
        try:
            sent = 0
            while len(host.board.members) < host.board.max_members:
                for c in clients:  # the relay takes 120 a minute from each
                    for _ in range(10):
                        await c.send_sealed(
                            seal(keys, make_stats(Identity.generate(), keys, fake)[0])
                        )
                        sent += 1
                await asyncio.to_thread(
                    host.transport.wait_for,
                    lambda s=sent: host.transport.counters["stats_delivered"] >= s - 20,
                    10,
                )
                assert sent < 330, f"the board never filled: {len(host.board.members)}"
        finally:
            for c in clients:
                await c.close()

    asyncio.run(flood())
    assert len(host.board.members) == host.board.max_members
    j = student(host, tmp_path, "ada")
    me = j.transport.ident.node_id
    node = node_of(j.cfg, j.transport, "ada", j.callback(Quiet()))
    j.transport.start()
    try:
        linked(j)
        node.run_round()  # shares its groups (the host verifies them), then its figures
        qpr = host.cfg.questions_per_round  # its row is there from its admission on (#3)
        assert host.transport.wait_for(
            lambda: getattr(_row(host, me), "received_here", 0) == qpr, 10
        ), host.board.dropped
        assert _row(host, me).name == "ada"
        assert len(host.board.members) == host.board.max_members
        assert host.board.dropped["evicted"] == 1
    finally:
        j.transport.close()


def test_the_host_says_goodbye_on_every_path_and_students_are_told(host, tmp_path) -> None:
    """Issue 28: after the host's q, students kept training with no word. The host's signed
    "ended" reaches a student linked to its address and one that only has the relay; each is
    told once (its own choice: stop, or go on alone); a member's forged goodbye is ignored."""
    direct, far = student(host, tmp_path, "ada"), student(host, tmp_path, "bob")
    far.transport.manual = []  # the host's address is unreachable: the relay only
    told = {"ada": [], "bob": []}
    for j in (direct, far):
        j.on_class_ended.append(lambda j=j: told[j.cfg.name].append(1))
        j.transport.start()
    try:
        assert direct.transport.wait_for(
            lambda: host.transport.ident.node_id in direct.transport.connected(), 10
        )
        relay = f"relay:{far.relay}"
        for j in (direct, far):
            assert j.transport.wait_for(lambda j=j: relay in j.transport.connected(), 10)
        assert host.transport.ident.node_id not in far.transport.connected()
        # a member's own "ended" (anyone in the room can sign one) is not the host's
        from sapo_edge.swarm.progress import Progress

        direct.transport.stats.send_goodbye(Progress("ended", name="teacher"))
        assert far.transport.wait_for(lambda: far.transport.counters["progress_delivered"] >= 1, 10)
        assert not far.class_ended.is_set()
        said = []
        host.end(said.append)
        for j in (direct, far):
            assert j.class_ended.wait(10), j.cfg.name
        assert told == {"ada": [1], "bob": [1]}
        assert said and said[0].startswith("told the class it ended")
    finally:
        for j in (direct, far):
            j.transport.close()


def test_a_student_whose_rounds_are_done_is_still_told_the_class_ended(
    host, tmp_path, tiny_qwen
) -> None:
    """Issue 28: a student whose run had ended (its dashboard still on screen) was never told
    the class ended: its node had closed with its last round. The dashboard keeps it open
    (`keep_open`) until the student quits."""
    from sapo_edge.run.runner import run_single

    j = student(host, tmp_path, "ada")
    j.session.keep_open = True  # what the student's dashboard sets (tui/joined.py)
    small = dict(questions_per_round=1, group_size=2, max_new_tokens=4, local_samples=1)
    cfg = dataclasses.replace(j.cfg, model=str(tiny_qwen), rounds=1, external_samples=0, **small)
    try:
        node = run_single(cfg, j.callback(Quiet()), lambda _m: None, None, j.session)
        assert node.round == 1  # its rounds are done
        assert j.transport.wait_for(
            lambda: host.transport.ident.node_id in j.transport.connected(), 10
        )
        host.end(lambda _m: None)
        assert j.class_ended.wait(10)
    finally:
        j.transport.close()


def test_a_slow_laptop_in_a_qwen_class_joins_with_lighter_work_and_is_told(tmp_path: Path) -> None:
    """The class runs Qwen at the paper's settings; this laptop's estimate (the tests pin an
    AVX2 laptop's rates) is many minutes a round, so it joins with the small model (a hub name,
    never a path here), is told why, and keeps the class's task; --model keeps the class's."""
    cfg = make_cfg(
        tmp_path / "host", listen="127.0.0.1:0", mdns=False, model="Qwen/Qwen2.5-0.5B-Instruct"
    )
    h = ClassHost(
        dataclasses.replace(cfg, max_new_tokens=256, group_size=8, questions_per_round=8),
        HostOptions(address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web=""),
        identity=Identity.generate(),
        log=lambda _m: None,
    )
    h.start()
    try:
        local = dict(out_dir=str(tmp_path / "s"), name="slow", listen="127.0.0.1:0", mdns=False)
        joined = join_class(h.code, local, identity=Identity.generate(), log=lambda _m: None)
        joined.transport.close()
        assert joined.cfg.model == "hub:smollm2-135m"
        assert joined.cfg.domains == h.cfg.domains and joined.cfg.group_size == 8
        assert any("still shares its text with the class" in n for n in joined.notes)
        mine = dict(local, model="Qwen/Qwen2.5-0.5B-Instruct", name="mine")
        kept = join_class(h.code, mine, identity=Identity.generate(), log=lambda _m: None)
        kept.transport.close()
        assert kept.cfg.model == "Qwen/Qwen2.5-0.5B-Instruct"
        assert not any("still shares" in n for n in kept.notes)
    finally:
        h.close()


def test_a_student_on_a_cpu_decides_its_dtype_once(host, tmp_path, monkeypatch) -> None:
    """issue 55: the join path chose the CPU dtype for the class's pace and the backend chose it
    again when it loaded; the student's settings now carry the one choice (`--dtype auto`'s
    here), which the backend loads and a run continued from the folder trains in."""
    monkeypatch.setenv("SAPO_EDGE_CPU_DTYPE", "bfloat16")
    j = student(host, tmp_path, "ada")
    try:
        assert j.cfg.dtype == "bfloat16"
    finally:
        j.transport.close()
