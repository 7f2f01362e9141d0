"""Two nodes that dial each other at the same moment (two laptops seeing each other's mDNS
advert): both connections complete, one is retired, and no batch either side published while
they settled is lost. Also: a batch published while a peer's link is down for a moment goes on
its next link."""

from __future__ import annotations

import time

from swarm_util import batch_for

FAST_PUBLISH = dict(max_batches_per_minute=60_000)  # pacing out of the way: publish every ms


def _publish_through_settle(a, b, rounds: list[int]) -> tuple[int, int]:
    """Publish from both sides every millisecond from the moment each sees the other linked,
    until both hold one link with the same dialer and nothing is being retired, then 20 more
    each. Returns how many each published while linked (every one of them must arrive)."""
    ida, idb = a.ident.node_id, b.ident.node_id
    sent = {ida: 0, idb: 0}

    def settled() -> bool:
        la, lb = a.table.links.get(idb), b.table.links.get(ida)
        return la is not None and lb is not None and la.dialer == lb.dialer

    extra = 0
    deadline = time.monotonic() + 30.0
    while extra < 20 and time.monotonic() < deadline:
        for n, other in ((a, idb), (b, ida)):
            if other in n.connected():
                rounds[0] += 1
                n.publish(batch_for(n.ident, rounds[0], n=1, start=rounds[0] % 50))
                sent[n.ident.node_id] += 1
        if settled():
            extra += 1
        time.sleep(0.001)
    assert extra >= 20, "the pair never settled on one link"
    return sent[ida], sent[idb]


def test_nodes_that_dial_each_other_at_once_lose_no_batch_while_they_settle(nodes) -> None:
    rounds = [0]
    retired = 0
    for _trial in range(6):
        a, b = nodes(**FAST_PUBLISH), nodes(**FAST_PUBLISH)
        for n, o in ((a, b), (b, a)):  # both dial at once, as on each other's LAN advert
            n._loop.call_soon_threadsafe(n.dialer.on_found, o.ident.node_id, "127.0.0.1", o.port)
        sent_a, sent_b = _publish_through_settle(a, b, rounds)
        assert sent_a > 0 and sent_b > 0
        assert b.wait_for(lambda b=b, s=sent_a: b.counters["delivered"] >= s, 20), (
            f"{b.counters['delivered']} of {sent_a} batches from a arrived",
            dict(b.counters),
        )
        assert a.wait_for(lambda a=a, s=sent_b: a.counters["delivered"] >= s, 20), (
            f"{a.counters['delivered']} of {sent_b} batches from b arrived",
            dict(a.counters),
        )
        for n in (a, b):
            assert not n.rejections(), n.rejections()  # nothing honest counted against anyone
        assert (b.counters["delivered"], a.counters["delivered"]) == (sent_a, sent_b)  # once
        retired += a.counters["links_retired"] + b.counters["links_retired"]
        a.close()
        b.close()
    assert retired > 0  # the race happened (two links, one retired) in these trials
