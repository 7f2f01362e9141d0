"""Issue 44, item 5: junk by bytes on a room's NATS subjects, against a real nats-server. ~48 MiB/s
of 1 MiB junk spent the route's junk cap before the seal check, and honest batches arriving in
the rest of each second were shed unopened (4-6 of 24 got through); the class's stats subject
had no junk cap at all. A member's messages carry a tag now (nats_gate.py) and are always
tried; junk is tried only within the cap, on every subject."""

from __future__ import annotations

import asyncio
import os
import random
import time

import nats
import pytest
from nats_util import NatsCluster, require_binary
from swarm_util import FAST, WAIT, net, sealed
from test_swarm_stats import figures, stats_box

from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.nats_gate import SEEN, SHED, TRY, TRY_CAPPED, JunkGate
from sapo_edge.swarm.network import NetworkTransport
from sapo_edge.swarm.roomkey import new_room_key, room_keys
from sapo_edge.swarm.shards import EVERYTHING, leaf_subject

QUIET_NATS = {
    "tick_s": 3600.0,
    "reconnect_wait": 0.1,
    "ping_interval": 1.0,
    "start_fan": EVERYTHING,
}


@pytest.fixture(scope="module")
def server():
    c = NatsCluster(require_binary(), n=1).start()
    yield c.urls[0]
    c.stop()


@pytest.fixture
def made():
    out = []
    yield out
    for t in out:
        t.close()


def nats_node(made, url: str, code: str, **nats_kw):
    t = net(relay=url, secret=code, reject_threshold=10**6, nats_options={**QUIET_NATS, **nats_kw})
    made.append(t)
    return t


def test_a_junk_flood_by_bytes_sheds_no_honest_batch(server, made) -> None:
    """48 MiB of 1 MiB junk with four honest batches among it, each after twelve junk messages,
    on one publisher's connection (so in that order); the cap lets one junk message a second
    be tried. Every honest batch is opened and delivered; most junk is shed unopened."""
    code = new_room_key()
    keys = room_keys("default", code)
    b = nats_node(made, server, code, junk_bytes_per_s=1 << 20)
    assert b.wait_for(lambda: b.nats.up and b.nats.subjects, WAIT), b.describe()
    member, gate = Identity.generate(), JunkGate(keys, 0)
    rng = random.Random(44)

    async def flood() -> None:
        nc = await nats.connect(server)
        try:
            for i in range(4):
                for _ in range(12):
                    junk = os.urandom(1 << 20)
                    await nc.publish(leaf_subject(keys.relay_id, rng), junk)
                box = sealed(member, keys, round_=1, start=10 * i)
                subject = leaf_subject(keys.relay_id, rng)  # as NatsRoute.publish tags it
                await nc.publish(subject, box, headers=gate.headers(subject, box))
                await nc.flush()
        finally:
            await nc.close()

    asyncio.run(flood())
    c = b.counters
    assert b.wait_for(lambda: c["nats_in_msgs"] == 52, WAIT), c
    # counted on arrival; delivered once opened and verified, a moment later on a loaded machine
    assert b.wait_for(lambda: c["delivered"] == 4, WAIT), c
    assert [s for s, _ in b.receive()] == [member.node_id] * 4
    assert c["nats_junk"] + c["nats_junk_shed"] == 48 and c["nats_junk_shed"] > 0, c
    assert not c["nats_slow_consumer"] and not any(p.muted for p in b.peers())


def test_junk_on_the_class_stats_subject_is_capped_and_stats_still_arrive(server, made) -> None:
    """The host's stats subject tried every message it got; now junk there is capped like on
    the room's subjects (one junk message a second tried here), and a member's stats arrive."""
    code = new_room_key()
    keys = room_keys("default", code)
    host = NetworkTransport(Identity.generate(), **{**FAST, "relay": server, "secret": code})
    host.nats.tick_s = 3600.0
    got = []
    host.stats.on_stats = got.append  # before start(): only a node with a handler hears the subject
    made.append(host.start())
    assert host.wait_for(lambda: host.nats.up and host.nats.classnet.stats_listening, WAIT)
    host.nats.junk_bytes_per_s = 64 << 10
    member, gate = Identity.generate(), JunkGate(keys, 0)
    subject = host.nats.classnet.stats_subject

    async def flood() -> None:
        nc = await nats.connect(server)
        try:
            for _ in range(50):
                await nc.publish(subject, os.urandom(64 << 10))
            box = stats_box(member, figures(3), keys=keys)
            await nc.publish(subject, box, headers=gate.headers(subject, box))
            await nc.flush()
        finally:
            await nc.close()

    asyncio.run(flood())
    c = host.counters
    assert host.wait_for(lambda: c["nats_stats_in"] == 51, WAIT), c
    assert host.wait_for(lambda: len(got) == 1, WAIT), c
    assert c["nats_junk_shed"] > 0 and c["nats_junk"] + c["nats_junk_shed"] == 50, c


def test_the_gate_tries_a_members_tag_once_and_junk_within_the_cap() -> None:
    keys = room_keys("default", new_room_key())
    member, now = Identity.generate(), [100.0]
    gate = JunkGate(keys, 1, clock=lambda: now[0])
    box = sealed(member, keys)
    tag = gate.headers("sapo.x.1", box)
    assert gate.verdict("sapo.x.1", box, tag) == TRY
    gate.opened(box)
    assert gate.verdict("sapo.x.1", box, tag) == SEEN  # a copy of what opened: not again
    assert gate.verdict("sapo.x.2", box, tag) == TRY_CAPPED  # the tag names its subject
    assert gate.verdict("sapo.x.1", box[:12] + bytes(len(box) - 12), tag) == SEEN  # nor junk
    unheard = sealed(member, keys)  # a member's box this node never got, its tag copied onto
    other = unheard[:12] + os.urandom(len(unheard) - 12)  # other bytes: tried once
    copied = gate.headers("sapo.x.3", other)
    assert gate.verdict("sapo.x.3", other, copied) == TRY
    gate.failed(other, TRY)
    assert gate.verdict("sapo.x.3", other, copied) == SHED  # its bytes spent the cap
    now[0] += 1.0
    assert gate.verdict("sapo.x.3", other, copied) == TRY_CAPPED  # a new second
    stale = {"Sapo-Tag": f"{int(time.time()) - 3600}.{'0' * 32}"}
    assert gate.verdict("sapo.x.4", sealed(member, keys), stale) == TRY_CAPPED
    fresh = sealed(member, keys)
    assert gate.verdict("sapo.x.4", fresh, gate.headers("sapo.x.4", fresh)) == TRY  # over the cap
