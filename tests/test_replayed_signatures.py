"""Issue 44, item 1: identities persist across classes, so a student from last week's class holds
the teacher's signed goodbye and a classmate's signed batch from it. Re-sealed under today's room
key and sent 25 times each through today's relay, they were refused as `wrong_room` and charged
to their signers: the teacher and the classmate were muted at every receiver, the real goodbye
never ended the class at a student and the classmate's genuine batch was dropped at the host.
What a genuine message can fail in another context (room, age, replay, rate) is now charged to
the route it came by, which is never muted."""

from __future__ import annotations

import asyncio
import time

from swarm_util import WAIT, batch_for, connect
from test_classroom import host, student  # noqa: F401 - the fixture is used by name

from sapo_edge.swarm.batches import BatchRejected, RolloutVerifier, make_rollouts, seal
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.progress import Progress
from sapo_edge.swarm.protocol import parse_message
from sapo_edge.swarm.roomkey import new_room_key, room_keys
from sapo_edge.swarm.stats import make_progress
from sapo_edge.swarm.stats_intake import StatsVerifier

SENDS = 25  # more than the 20 rejections a minute that mute a signer


def handled(t) -> int:
    """Messages the transport refused or dropped (from a muted signer), whoever was charged."""
    refused = sum(v for k, v in t.rejections().items() if k.endswith("wrong_room"))
    return refused + t.counters["dropped_muted"] + t.counters["stats_dropped_muted"]


def test_last_weeks_signatures_resent_through_the_relay_mute_no_one(host, tmp_path) -> None:  # noqa: F811
    teacher = host.transport.ident  # the teacher's identity, the same last week
    last_week = room_keys("class", new_room_key())
    classmate_id, attacker_id = Identity.generate(), Identity.generate()
    recorded_bye = make_progress(teacher, last_week, Progress("ended", name="teacher"))[0]
    recorded_batch = make_rollouts(classmate_id, last_week, batch_for(classmate_id), 1)[0]

    ada = student(host, tmp_path, "ada")  # the student who must be told the class ended
    classmate = student(host, tmp_path, "cy", ident=classmate_id)
    attacker = student(host, tmp_path, "eve", ident=attacker_id)  # holds today's room key
    for j in (ada, classmate):
        j.transport.start()
    try:
        relay = f"relay:{ada.relay}"
        for j in (ada, classmate):
            assert j.transport.wait_for(lambda j=j: relay in j.transport.connected(), WAIT)
        today = attacker.transport.keys

        async def resend() -> None:
            c = await connect(ada.relay, attacker_id, today, relay=True)
            try:
                for _ in range(SENDS):  # each re-sealed afresh: the relay's own filter passes it
                    await c.send_sealed(seal(today, recorded_bye))
                    await c.send_sealed(seal(today, recorded_batch))
                ok = await asyncio.to_thread(
                    ada.transport.wait_for, lambda: handled(ada.transport) >= 2 * SENDS, WAIT
                )
                assert ok, ada.transport.rejections()
                ok = await asyncio.to_thread(
                    host.transport.wait_for, lambda: handled(host.transport) >= SENDS, WAIT
                )
                assert ok, host.transport.rejections()
            finally:
                await c.close()

        asyncio.run(resend())
        delivered = host.transport.counters["delivered"]  # the classmate's genuine batch
        classmate.transport.publish(batch_for(classmate_id, 2))
        assert host.transport.wait_for(
            lambda: host.transport.counters["delivered"] > delivered, WAIT
        ), host.transport.counters
        assert classmate_id.node_id in [s for s, _ in host.transport.receive()]
        host.end(lambda _m: None)  # the teacher's real goodbye
        assert ada.class_ended.wait(WAIT), ada.transport.counters
        for t in (ada.transport, host.transport):
            assert not any(p.muted for p in t.peers()), t.peers()
            assert t.rejections(teacher.node_id) == {} and t.rejections(classmate_id.node_id) == {}
        assert ada.transport.rejections(relay)["stats_wrong_room"] == SENDS  # the route's
        assert ada.transport.rejections(relay)["wrong_room"] == SENDS
    finally:
        for j in (ada, classmate):
            j.transport.close()


def test_what_a_genuine_message_fails_elsewhere_is_charged_to_the_route() -> None:
    """The verifiers themselves: another room, too old, replayed or over the rate by signed
    time are refused with no signer to blame; what the signer signed wrong is still its own."""
    keys, other = room_keys("class", new_room_key()), room_keys("class", new_room_key())
    me, now = Identity.generate(), time.time()
    route = "relay:ws://r"

    def reason(verify, box) -> tuple[str, str | None]:
        try:
            verify(parse_message(box), route, now=now)
        except BatchRejected as e:
            return e.reason, e.signer
        return "", None

    stats, batches = StatsVerifier(keys, per_minute=2), RolloutVerifier(keys)
    bye = make_progress(me, keys, Progress("ended"))[0]
    assert reason(stats.verify, make_progress(me, other, Progress("ended"))[0]) == (
        "wrong_room",
        None,
    )
    old = make_progress(me, keys, Progress("ended"), sent_at=now - 86400)[0]
    assert reason(stats.verify, old) == ("expired", None)
    assert reason(stats.verify, bye) == ("", None)
    assert reason(stats.verify, bye) == ("replay", None)
    assert reason(batches.verify, make_rollouts(me, other, batch_for(me), 1)[0]) == (
        "wrong_room",
        None,
    )
    flood = StatsVerifier(keys, progress_per_minute=2)
    got = [reason(flood.verify, make_progress(me, keys, Progress("waiting"))[0]) for _ in range(3)]
    assert got[-1] == ("progress_rate_limited", None)
    wrong_producer = batch_for(Identity.generate())  # groups naming someone else: its own doing
    signed = make_rollouts(me, keys, wrong_producer, 1)[0]
    assert reason(batches.verify, signed) == ("wrong_producer", me.node_id)
