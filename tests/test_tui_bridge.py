"""The dashboard's data side, without a screen: the callback's messages, Aha detection, remedies."""

import errno

from scripted import make_cfg, make_node

from sapo_edge.checkpoints import CheckpointError
from sapo_edge.models import ModelNotFound
from sapo_edge.sampling import scored
from sapo_edge.swarm.transport import InProcessHub, NullTransport
from sapo_edge.tasks import TaskRef
from sapo_edge.trainer import RoundGroups
from sapo_edge.tui.bridge import TuiCallback, rollouts_of
from sapo_edge.tui.messages import (
    NodeStarted,
    PeersUpdated,
    PhaseStarted,
    Problem,
    RolloutsSeen,
    RoundDone,
)
from sapo_edge.tui.remedies import explain


def _group(domain, index, rewards, origin="self"):
    ref = TaskRef.make(domain, {}, 7, index)
    texts = [f"answer {i}" for i in range(len(rewards))]
    return scored(
        f"g-{domain}-{index}-{origin}", ref, f"q {domain} {index}", texts, rewards, origin
    )


def test_aha_marks_a_peer_success_where_all_own_completions_failed():
    own = [_group("bf", 0, [0, 0]), _group("arc_1d", 1, [1, 0])]
    ext = [
        _group("bf", 5, [0, 1], "id-b"),  # bf: every own completion failed -> Aha
        _group("arc_1d", 6, [1, 0], "id-b"),  # own arc_1d succeeded once -> no Aha
        _group("bf", 7, [0, 0], "id-c"),  # a peer failure is never an Aha
    ]
    items = rollouts_of(3, RoundGroups(own, ext), {"id-b": "bob"})
    assert [(r.origin, r.aha) for r in items] == [
        ("local", False),
        ("local", False),
        ("bob", True),
        ("bob", False),
        ("id-c", False),
    ]
    assert items[2].completion == "answer 1" and items[2].reward == 1.0  # the best completion
    # the very same question: judged against own completions of it, not of the domain
    same = [_group("arc_1d", 1, [0, 0], "id-b")]
    assert rollouts_of(3, RoundGroups(own, same), {})[-1].aha is False


def test_callback_sends_header_phases_round_peers_and_rollouts(tmp_path):
    cfg = make_cfg(tmp_path)
    hub = InProcessHub()
    sent = []
    a = make_node(cfg, "a", hub.connect("id-a"))
    b = make_node(cfg, "b", hub.connect("id-b"))
    b.callback = TuiCallback(sent.append, clock=lambda: 100.0)
    a.run_round()
    b.run_round()
    kinds = [type(m).__name__ for m in sent]
    assert kinds[0] == "NodeStarted"
    assert [m.phase for m in sent if isinstance(m, PhaseStarted)] == [
        "sampling",
        "generating",
        "scoring",
        "sharing",
        "training",
    ]
    head = sent[0]
    assert isinstance(head, NodeStarted) and head.name == "b" and head.model == "scripted"
    (done,) = [m for m in sent if isinstance(m, RoundDone)]
    assert done.reward_mean == 0.25 and done.swarm_reward == 0.25 and done.received == 2
    (peers,) = [m for m in sent if isinstance(m, PeersUpdated)]
    assert peers.source == "seen" and [p.node_id for p in peers.peers] == ["id-a"]
    (feed,) = [m for m in sent if isinstance(m, RolloutsSeen)]
    assert {r.origin for r in feed.rollouts} == {"local", "id-a"}


def test_no_peers_warning_names_the_remedy_once(tmp_path):
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    sent = []
    node.callback = TuiCallback(sent.append)
    for _ in range(7):
        node.run_round()
    problems = [m for m in sent if isinstance(m, Problem)]
    assert len(problems) == 1 and not problems[0].fatal
    assert "J to 0" in problems[0].remedy and "solo" in problems[0].remedy


def test_errors_become_a_title_and_a_remedy():
    title, remedy = explain(ModelNotFound("GGUF file x.gguf does not exist: check the path."))
    assert title == "Model not found" and "check the path" in remedy
    full = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise full
        except OSError as e:
            raise CheckpointError("no space left on the disk holding runs") from e
    except CheckpointError as e:
        title, remedy = explain(e, "runs/demo")
    assert title == "Disk full" and "runs/demo" in remedy and "--resume" in remedy
    title, remedy = explain(OSError(errno.EADDRINUSE, "Address already in use"))
    assert title == "Port in use" and "port" in remedy
    title, remedy = explain(RuntimeError("boom"))
    assert "log pane" in remedy and "RuntimeError" in title
