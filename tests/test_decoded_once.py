"""A batch is parsed once on its way from one node's trainer to another's: the sender's
encode_batch keeps the groups it checked (publish reads them), the receiver's verifier decodes
it and the trainer reads those groups. Each parse of a batch's JSON is counted here by wrapping
the one parser rollout.py calls for it."""

from __future__ import annotations

from swarm_util import WAIT, batch_for

import sapo_edge.data.rollout as rollout
from sapo_edge.data.rollout import decode_batch, groups_of


def _count_parses(monkeypatch) -> list[int]:
    parses = [0]
    real = rollout.loads_strict

    def counted(data, **kw):
        parses[0] += 1
        return real(data, **kw)

    monkeypatch.setattr(rollout, "loads_strict", counted)
    return parses


def test_a_batch_is_parsed_once_between_publish_and_the_trainers_groups(nodes, monkeypatch):
    a = nodes()
    b = nodes(peers=[f"127.0.0.1:{a.port}"])
    assert b.wait_for(lambda: len(b.connected()) == 1, WAIT)
    assert a.wait_for(lambda: len(a.connected()) == 1, WAIT)
    sent = batch_for(a.ident, 1, n=3)
    parses = _count_parses(monkeypatch)
    a.publish(sent)
    assert b.wait_for(lambda: b.counters["delivered"] == 1, WAIT)
    ((sender, payload),) = b.receive()
    groups = groups_of(payload)  # what Node._receive reads
    assert parses[0] == 1  # the receiver's verifier; not publish, not the trainer
    assert sender == a.ident.node_id and payload == sent
    assert groups == decode_batch(bytes(sent))  # the groups its bytes say, exactly


def test_the_inbox_counts_a_batchs_decoded_groups_against_its_bytes() -> None:
    """A flood of batches whose decoded groups take several times their wire size is bounded
    by what they hold, not by their bytes: a sender cannot fill memory past inbox_bytes."""
    from swarm_util import group

    from sapo_edge.data.rollout import encode_batch
    from sapo_edge.swarm.inbox import FairInbox

    many = [group("m" * 32, 1, i, completions=("x",) * 64, rewards=(0.5,) * 64) for i in range(64)]
    batch = encode_batch(many)
    inbox = FairInbox(max_items=1000, max_bytes=20 * len(batch))
    for _ in range(20):
        inbox.put("m" * 32, batch)
    assert inbox.bytes <= 20 * len(batch) and len(inbox) < 20 // 3 + 1  # ~footprint/len each
    assert inbox.bytes == sum(b.footprint for _s, b in inbox.items)
