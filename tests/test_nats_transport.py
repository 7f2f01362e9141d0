"""`--relay nats://` against real nats-server processes on loopback: two tiny-model nodes on
different servers of a 3-server cluster train on each other's groups; killing a node's server
mid-run loses no node and trains nothing twice; hostile payloads published on the room's
subjects get the same counted rejections as through the websocket relay; 1,000 scripted nodes
keep their inbound under the budget. Every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path

import pytest
from nats_util import NatsCluster, require_binary
from scripted import Quiet, ScriptedBackend, make_cfg
from swarm_util import WAIT, RelayThread, connect, envelope, keys_of, net, sealed
from task_configs import ONE_DIGIT_ADD

from sapo_edge.config.settings import Config, ConfigError
from sapo_edge.rl.trainer import Node
from sapo_edge.swarm.batches import MAX_SEALED_BYTES, seal
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.relay import Relay
from sapo_edge.swarm.roomkey import new_room_key
from sapo_edge.swarm.shards import EVERYTHING, leaf_subject

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

FAST_NATS = {"tick_s": 0.1, "reconnect_wait": 0.1, "ping_interval": 1.0, "start_fan": EVERYTHING}


@pytest.fixture(scope="module")
def cluster():
    c = NatsCluster(require_binary()).start()
    yield c
    c.stop()


@pytest.fixture
def made():
    """Transports (closed afterwards)."""
    out = []
    yield out
    for t in out:
        t.close()


def nats_net(made, url: str, **kw):
    t = net(relay=url, nats_options={**FAST_NATS, **kw.pop("nats", {})}, **kw)
    made.append(t)
    assert t.wait_for(lambda: t.nats.up and t.nats.subjects, 10), t.describe()
    return t


def test_nats_relay_urls_are_checked_and_credentials_stay_out_of_them() -> None:
    assert Config(relay="nats://10.0.0.5:4222").relay == "nats://10.0.0.5:4222"
    assert Config(relay="tls://a:4222,tls://b:4222").max_inbound_groups == 128
    for bad, msg in [
        ("nats://alice:pw@h:4222", "SAPO_EDGE_NATS_USER"),
        ("nats://a:1,tls://b:2", "use tls:// for all"),
        ("nats://h:4222/x", "only scheme://HOST:PORT"),
        ("nats://", "write nats://HOST:4222"),
    ]:
        with pytest.raises(ConfigError, match=msg) as e:
            Config(relay=bad)
        assert "pw" not in str(e.value).replace("relay 'nats://alice:pw@h:4222'", "")
    with pytest.raises(ConfigError, match="max_inbound_groups"):
        Config(max_inbound_groups=0)


def _cfg(tiny_qwen, tmp_path):
    return Config(
        model=str(tiny_qwen),
        dtype="float32",
        domains={"basic_arithmetic": 1.0},
        domain_configs={"basic_arithmetic": ONE_DIGIT_ADD},
        questions_per_round=2,
        group_size=3,
        max_new_tokens=24,
        local_samples=1,
        external_samples=1,
        lora_r=4,
        learning_rate=1e-3,
        checkpoint_every=0,
        out_dir=str(tmp_path),
    )


@pytest.mark.slow
def test_two_tiny_model_nodes_on_different_servers_train_on_each_others_groups(
    cluster, made, tiny_qwen, tmp_path
) -> None:
    from test_mlx_sim import ScriptedGenerations

    from sapo_edge.backends import load_backend

    code = new_room_key()
    a = nats_net(made, cluster.urls[0], secret=code)
    b = nats_net(made, cluster.urls[1], secret=code)
    assert a.nats.server != b.nats.server  # two servers, linked by the cluster's routes
    cfg = _cfg(tiny_qwen, tmp_path)
    nodes = []
    for name, t in (("a", a), ("b", b)):
        backend = load_backend(tiny_qwen, cfg, f"nats_{name}", "cpu", kind="torch", log=print)
        node = Node(cfg, ScriptedGenerations(backend), t, node_id=t.ident.node_id, name=name,
                    model_id="tiny", out_dir=tmp_path / name, callback=Quiet())  # fmt: skip
        nodes.append(node)
    try:
        trained = {"a": set(), "b": set()}
        for _ in range(8):  # the first rounds may publish before the routes carry the interest
            for node, other in ((nodes[0], b), (nodes[1], a)):
                before = other.counters["delivered"]
                report = node.run_round()
                trained[node.name].update(report.external_from)
                other.wait_for(lambda o=other, n=before: o.counters["delivered"] > n, WAIT)
            if all(trained.values()):
                break
        assert trained == {"a": {b.ident.node_id}, "b": {a.ident.node_id}}, (
            nodes[0].pool.stats(),
            nodes[1].pool.stats(),
        )
        assert all(r.train_tokens > 0 for r in [nodes[0].run_round(), nodes[1].run_round()])
        assert "NATS up" in a.describe() and f"relay:{cluster.urls[0]}" in a.connected()
    finally:
        for node in nodes:
            node.backend.close()


def test_killing_a_nodes_server_mid_run_loses_no_node_and_trains_nothing_twice(
    made, tmp_path
) -> None:
    c = NatsCluster(require_binary()).start()
    try:
        a = nats_net(made, c.urls[0])  # one URL: the others come from the cluster's INFO
        b = nats_net(made, c.urls[1])
        cfg = make_cfg(tmp_path)
        na, nb = (
            Node(
                cfg,
                ScriptedBackend(),
                t,
                node_id=t.ident.node_id,
                name=n,
                model_id="scripted",
                out_dir=tmp_path / n,
                callback=Quiet(),
            )  # fmt: skip
            for n, t in (("a", a), ("b", b))
        )
        used = {"a": [], "b": []}

        def round_pair() -> None:
            for node, other in ((na, b), (nb, a)):
                before = other.counters["delivered"]
                node.run_round()
                used[node.name] += [g.group_id for g in node.last_groups.external]
                other.wait_for(lambda o=other, n=before: o.counters["delivered"] > n, WAIT)

        for _ in range(3):
            round_pair()
        killed = c.servers[0]
        killed.kill()
        assert a.wait_for(lambda: a.counters["nats_reconnected"] >= 1, 15), a.counters
        assert a.nats.server and a.nats.server != f"127.0.0.1:{killed.port}"
        before = (a.counters["delivered"], b.counters["delivered"])
        for _ in range(3):
            round_pair()
        assert a.counters["delivered"] > before[0] and b.counters["delivered"] > before[1]
        assert used["a"] and used["b"]
        for name, ids in used.items():
            assert len(ids) == len(set(ids)), f"{name} trained a group twice"
        for t in (a, b):
            assert t.rejections(t.nats.key)["replay"] == 0 and t.counters["duplicate"] == 0
    finally:
        c.stop()


class ForwardingRelay(Relay):
    """The websocket relay with its own replay filter off: it forwards whatever a client sends,
    so the node's checks (the ones compared with NATS) see every payload."""

    def _check(self, client, sealed_box):
        return None


def _hostile(code: str, me: Identity) -> list[tuple[bytes, str | None]]:
    keys, other_room = keys_of("default", code), keys_of("default", new_room_key())
    msg = json.loads(envelope(me, keys, start=90))
    msg["signature"] = ("00" if msg["signature"][:2] != "00" else "11") + msg["signature"][2:]
    good = sealed(me, keys, round_=5, start=10)
    return [
        (b"junk", "bad_frame"),
        (b"\x07" * 200, "wrong_secret"),
        (seal(keys, json.dumps(msg).encode()), "bad_signature"),  # forged
        (seal(keys, envelope(me, other_room)), "wrong_room"),  # signed for another room
        (sealed(me, other_room), "wrong_secret"),  # sealed with another room's key
        (envelope(me, keys), "wrong_secret"),  # not sealed at all, in a keyed room
        (sealed(me, keys, sent_at=time.time() - 86400), "expired"),
        (good, None),
        (good, "replay"),
    ]


def _counted(node, route: str, me: Identity):
    rej = node.rejections(route) + node.rejections(me.node_id)
    return {k: v for k, v in rej.items() if v}


def test_hostile_payloads_through_nats_get_the_relays_counted_rejections(cluster, made) -> None:
    code = new_room_key()
    me = Identity.generate()
    cases = _hostile(code, me)
    # the fan-in stays EVERYTHING: the planner, ticking every 0.1 s, narrowed it once it had
    # heard a few of these messages (how many depends on the machine's speed), and a case
    # published to a leaf outside the new subtrees was never heard, so never counted
    n = nats_net(made, cluster.urls[0], secret=code, reject_threshold=1000, nats={"tick_s": 3600.0})

    async def through_nats() -> None:
        import nats

        nc = await nats.connect(cluster.urls[0])  # an outsider's client, on the node's server
        try:
            for i, (data, reason) in enumerate(cases):
                before = _counted(n, n.nats.key, me).get(reason, 0)
                delivered = n.counters["delivered"]
                await nc.publish(leaf_subject(n.keys.relay_id, random.Random(i)), data)
                await nc.flush()
                ok = await asyncio.to_thread(
                    n.wait_for,
                    (lambda d=delivered: n.counters["delivered"] > d)
                    if reason is None
                    else (lambda r=reason, b=before: _counted(n, n.nats.key, me).get(r, 0) > b),
                    WAIT,
                )
                assert ok, f"{reason}: {_counted(n, n.nats.key, me)}"
            big = b"x" * (MAX_SEALED_BYTES + 100)  # under the server's max_payload, over ours
            await nc.publish(leaf_subject(n.keys.relay_id, random.Random(99)), big)
            await nc.flush()
            ok = await asyncio.to_thread(
                n.wait_for, lambda: n.rejections(n.nats.key)["too_large"] == 1, WAIT
            )
            assert ok, n.rejections(n.nats.key)
        finally:
            await nc.close()

    asyncio.run(through_nats())
    by_nats = _counted(n, n.nats.key, me)

    r = RelayThread()
    try:
        r.relay.__class__ = ForwardingRelay
        w = net(relay=r.url, secret=code, reject_threshold=1000)
        made.append(w)
        assert w.wait_for(lambda: any(k.startswith("relay:") for k in w.connected()), WAIT)
        route = f"relay:{r.url}"

        async def through_ws() -> None:
            c = await connect(r.url, me, keys_of("default", code), relay=True)
            try:
                for data, _reason in cases:
                    await c.send_sealed(data)
                total = len([x for x in cases if x[1]])
                ok = await asyncio.to_thread(
                    w.wait_for, lambda: sum(_counted(w, route, me).values()) >= total, 5
                )
                assert ok, _counted(w, route, me)
            finally:
                await c.close()

        asyncio.run(through_ws())
        by_ws = _counted(w, route, me)
    finally:
        r.close()
    assert by_ws == {k: v for k, v in by_nats.items() if k != "too_large"}  # the same checks
    assert by_nats["too_large"] == 1  # the relay refuses it itself (its websocket frame limit)
    assert n.counters["delivered"] == w.counters["delivered"] == 1
    assert [s for s, _ in n.receive()] == [me.node_id]
    assert not any(p.muted for p in n.peers())  # a route is charged, never muted


def test_junk_on_the_rooms_subjects_sheds_no_honest_batch_and_narrows_no_fan_in(
    cluster, made
) -> None:
    """An outsider with publish rights on the server (not in the room) learns the route from a
    subject and floods it with random bytes. They used to count as opened against the round's
    budget and as arrivals in the fan-in estimate: honest batches were shed unopened and the
    fan-in narrowed. Only what unseals counts now; junk is charged to the route and capped
    apart."""
    import os

    import nats
    from swarm_util import batch_for

    code = new_room_key()
    b = nats_net(made, cluster.urls[0], secret=code, reject_threshold=10**6, max_inbound_groups=8)
    a = nats_net(made, cluster.urls[1], secret=code)
    junk = 60  # under the old subscription queue (64): what sheds honest batches is the budget

    async def flood() -> None:
        nc = await nats.connect(cluster.urls[0])
        try:
            rng = random.Random(1)
            for _ in range(junk):
                await nc.publish(leaf_subject(b.keys.relay_id, rng), os.urandom(64))
            await nc.flush()
        finally:
            await nc.close()

    asyncio.run(flood())
    assert b.wait_for(lambda: b.counters["nats_in_msgs"] == junk, 10), b.counters
    a.publish(batch_for(a.ident, 1))
    a.publish(batch_for(a.ident, 1, start=10))
    assert b.wait_for(lambda: b.counters["delivered"] == 2, 10), b.counters
    assert b.nats.opened == b.nats.heard == 2 and b.counters["nats_shed"] == 0
    assert b.nats.planner.fan == EVERYTHING  # the junk did not narrow the fan-in
    assert b.counters["nats_junk"] == junk
    assert b.rejections(b.nats.key)["wrong_secret"] == junk  # charged to the route
    assert not any(p.muted for p in b.peers())


def test_a_junk_flood_is_capped_apart_from_the_budget(cluster, made) -> None:
    """Junk costs an unseal attempt each; over `junk_bytes_per_s` tried, the rest of that
    second is dropped unopened (counted), without touching the round's budget. A burst of 300
    is queued whole (the subscription's message cap was 64: the client dropped the rest, junk
    and honest alike, as a slow consumer)."""
    import os

    import nats

    code = new_room_key()
    b = nats_net(
        made, cluster.urls[0], secret=code, reject_threshold=10**6, nats={"junk_bytes_per_s": 640}
    )

    async def flood() -> None:
        nc = await nats.connect(cluster.urls[0])
        try:
            rng = random.Random(2)
            for _ in range(300):
                await nc.publish(leaf_subject(b.keys.relay_id, rng), os.urandom(64))
            await nc.flush()
        finally:
            await nc.close()

    asyncio.run(flood())
    c = b.counters
    assert b.wait_for(lambda: c["nats_junk"] + c["nats_junk_shed"] == 300, 10), c
    assert 10 <= c["nats_junk"] < 300 and c["nats_junk_shed"] > 0 and not c["nats_slow_consumer"]
    assert b.nats.opened == b.nats.heard == 0


@pytest.mark.slow
def test_a_thousand_scripted_nodes_keep_inbound_under_the_budget(cluster) -> None:
    """1,000 simulated nodes (bench/scale_nodes.py: real Intake, real NatsRoute), 20 to a NATS
    connection, spread over the cluster; each publishes one batch a round. Over everything
    each would get 999 batches a round; sharded, none opens more than its budget."""
    import nats
    from scale_nodes import NatsSimNode, Shape

    budget, n, shape = 8, 1000, Shape(groups=2, completions=2, chars=40, question_chars=20)
    keys = keys_of("thousand", new_room_key())

    async def run() -> list:
        async def quiet(_e) -> None:  # slow-consumer drops are counted per node, not logged
            pass

        conns = [await nats.connect(cluster.urls[i % 3], error_cb=quiet) for i in range(n // 20)]
        nodes = [
            NatsSimNode(keys, shape, i, conns[i // 20], budget_groups=budget, tick_s=0.05)
            for i in range(n)
        ]
        for node in nodes:
            await node.start()
        rows = []
        try:
            for r in range(5):
                for node in nodes:
                    node.publish(r + 1)
                for c in conns:  # the shared bound: a loaded machine took over 10 s once
                    await c.flush(timeout=WAIT)
                last, quiet_since, t0 = -1, time.monotonic(), time.monotonic()
                while time.monotonic() - t0 < 10 and time.monotonic() - quiet_since < 0.2:
                    total = sum(x.stats.in_msgs for x in nodes)
                    if total != last:
                        last, quiet_since = total, time.monotonic()
                    await asyncio.sleep(0.05)
                rows.append([(node.end_round(), node.route.planner.fan) for node in nodes])
                await asyncio.sleep(0.1)
        finally:
            for node in nodes:
                await node.close()
            for c in conns:
                await c.close()
        return rows

    rounds = asyncio.run(asyncio.wait_for(run(), 5 * WAIT))
    for stats in rounds:  # the hard bound, every node, every round
        assert all(st.groups <= budget and st.batches <= budget for st, _ in stats)
    settled = [st for stats in rounds[2:] for st, _ in stats]
    mean_in = sum(st.in_msgs for st in settled) / len(settled)
    assert mean_in <= 1.3 * budget / shape.groups, mean_in  # traffic, not only work, is bounded
    assert sum(st.groups for st in settled) / len(settled) >= 0.3 * budget  # and it flows
    shares = sorted(fan.share for stats in rounds[2:] for _, fan in stats)
    assert shares[-1] < 1  # nobody listens to the whole room
    # and nine in ten listen to a small part of it (~1/1000 here; a node whose arrivals a
    # loaded machine slowed may widen its share for a while: seen up to 1/16, never all)
    assert shares[int(0.9 * len(shares))] <= 1 / 64, shares[-20:]


def _serve_rooms(tmp_path: Path, rooms_conf: Path, env: dict) -> tuple[str, object]:
    """A nats-server whose authorization is the packaged way: `include` a rooms.conf."""
    import os
    import shutil
    import subprocess

    from nats_util import free_ports

    port, monitor = free_ports(2)
    shutil.copy(rooms_conf, tmp_path / "rooms.conf")
    conf = tmp_path / "server.conf"
    conf.write_text(
        f"host: 127.0.0.1\nport: {port}\nhttp: 127.0.0.1:{monitor}\n"
        'authorization {\n  include "rooms.conf"\n}\n'
    )
    proc = subprocess.Popen(
        [require_binary(), "-c", str(conf)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return f"nats://127.0.0.1:{port}", proc


async def _try_subjects(url: str, user: str, password: str, subjects: list[str]) -> list[str]:
    """Subscribe to and publish on each subject as `user`: the errors the server sent back
    (each message is received, or its permission error is)."""
    import nats

    errors: list[str] = []
    got: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))

    async def on_msg(msg) -> None:
        got.append(msg.subject)

    for _ in range(100):  # the server is starting: bounded retries of the first connect
        try:
            nc = await nats.connect(url, user=user, password=password, error_cb=on_error)
            break
        except Exception:  # noqa: BLE001 - not listening yet
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("nats-server did not start")
    errors.clear()  # the refused connects while it started
    try:
        for s in subjects:
            await nc.subscribe(s if s.count(".") < 2 else s.rsplit(".", 1)[0] + ".>", cb=on_msg)
        await nc.flush()
        for s in subjects:
            await nc.publish(s, b"x")
        await nc.flush()
        async with asyncio.timeout(5):
            while len(got) + len(errors) < len(subjects):
                await asyncio.sleep(0.01)
    finally:
        await nc.close()
    return errors


def test_the_packaged_rooms_conf_lets_a_room_use_its_tree_and_class_subject(tmp_path) -> None:
    """The packaged servers gave every laptop one user on `sapo.>`: the class's stats subject
    (`sapo-class.<route>`) was refused (a permissions violation: the board stayed empty over
    NATS), and any laptop could publish on any room's subjects. The shipped rooms.conf entry
    (made by `room nats-user`) allows its room's tree and class subject, and nothing else."""
    from sapo_edge.swarm.nats_room import class_subject
    from sapo_edge.swarm.roomkey import room_keys

    packaged = Path(__file__).resolve().parent.parent / "packaging" / "nats"
    text = (packaged / "rooms.conf").read_text()
    key = text.split("for the room\n# key ", 1)[1].split(":", 1)[0]
    relay_id = room_keys("default", key).relay_id
    for conf in ("classroom-leaf.conf", "regional-cluster.conf"):
        assert 'include "rooms.conf"' in (packaged / conf).read_text()
    url, proc = _serve_rooms(
        tmp_path, packaged / "rooms.conf", {"NATS_ROOM_EXAMPLE_ROOM_PASSWORD": "pw"}
    )
    try:
        own = [leaf_subject(relay_id, random.Random(1)), class_subject(relay_id)]
        assert asyncio.run(_try_subjects(url, "example-room", "pw", own)) == []
        other = room_keys("default", new_room_key()).relay_id
        theirs = [leaf_subject(other, random.Random(2)), class_subject(other)]
        refused = asyncio.run(_try_subjects(url, "example-room", "pw", theirs))
        assert len(refused) >= 2 and all("permissions violation" in e for e in refused)
    finally:
        proc.terminate()
        proc.wait(10)


def test_room_nats_user_confines_each_room_to_its_own_subjects(tmp_path, capsys, monkeypatch, made):
    """Two rooms on one server, each with the entry `room nats-user` prints: a room's nodes
    exchange batches through it, and a laptop of the other room can neither publish on nor
    listen to its subjects (the junk flood of issue 31 needs publish rights on them)."""
    from sapo_edge.cli import main
    from sapo_edge.swarm.roomkey import room_keys

    entries, keys = [], {}
    for user in ("lab-a", "lab-b"):
        keys[user] = new_room_key()
        monkeypatch.setenv("SAPO_EDGE_SECRET", keys[user])
        assert main(["room", "nats-user", "--user", user]) == 0
        entries.append(capsys.readouterr().out)
    monkeypatch.delenv("SAPO_EDGE_SECRET")
    assert main(["room", "nats-user", "--user", "lab-a"]) == 2  # no key: a sentence, rc 2
    assert "SAPO_EDGE_SECRET" in capsys.readouterr().err
    rooms = tmp_path / "made-rooms.conf"
    rooms.write_text("users = [\n" + "".join(entries) + "]\n")
    env = {"NATS_ROOM_LAB_A_PASSWORD": "pa", "NATS_ROOM_LAB_B_PASSWORD": "pb"}
    url, proc = _serve_rooms(tmp_path, rooms, env)
    try:
        a_id = room_keys("default", keys["lab-a"]).relay_id
        a_subjects = [leaf_subject(a_id, random.Random(3)), f"sapo-class.{a_id}"]
        refused = asyncio.run(_try_subjects(url, "lab-b", "pb", a_subjects))
        assert len(refused) >= 2 and all("permissions violation" in e for e in refused)
        monkeypatch.setenv("SAPO_EDGE_NATS_USER", "lab-a")
        monkeypatch.setenv("SAPO_EDGE_NATS_PASSWORD", "pa")
        n1 = nats_net(made, url, secret=keys["lab-a"])
        n2 = nats_net(made, url, secret=keys["lab-a"])
        from swarm_util import batch_for

        n1.publish(batch_for(n1.ident, 1))
        assert n2.wait_for(lambda: n2.counters["delivered"] == 1, 10), n2.counters
        assert not n1.counters["nats_error"] and not n2.counters["nats_error"]
    finally:
        proc.terminate()
        proc.wait(10)
