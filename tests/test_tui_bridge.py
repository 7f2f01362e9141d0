"""The dashboard's data side, without a screen: the callback's messages, Aha detection, remedies."""

import dataclasses
import errno
from types import SimpleNamespace

from scripted import make_cfg, make_node

from sapo_edge.data.tasks import TaskRef
from sapo_edge.models.resolve import ModelNotFound
from sapo_edge.rl.checkpoints import CheckpointError
from sapo_edge.rl.sampling import scored
from sapo_edge.rl.trainer import RoundGroups
from sapo_edge.run.remedies import explain
from sapo_edge.swarm.transport import InProcessHub, NullTransport
from sapo_edge.tui.bridge import TuiCallback, rollouts_of
from sapo_edge.tui.messages import (
    NodeStarted,
    NothingTrained,
    PeersUpdated,
    PhaseProgress,
    PhaseStarted,
    Problem,
    RolloutsSeen,
    RoundDone,
)
from sapo_edge.tui.nothing_trained import why_nothing_trained


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
    denied = PermissionError(errno.EACCES, "Permission denied", "/srv/runs/node")
    title, remedy = explain(denied, "/srv/runs")
    assert title == "Cannot write here" and "/srv/runs/node" in remedy and "--out-dir" in remedy
    title, remedy = explain(RuntimeError("boom"))
    assert "log pane" in remedy and "RuntimeError" in title


def test_decode_steps_become_throttled_progress_with_ended_completions(tmp_path):
    node = make_node(make_cfg(tmp_path, questions_per_round=2, group_size=4), "a", NullTransport())
    now = [0.0]
    sent = []
    cb = TuiCallback(sent.append, clock=lambda: now[0])
    cb.on_phase(node, "generating")
    # 8 completions: all run for 3 steps, then 5 of them end; a step every 0.1 s
    for step, tokens in enumerate([8, 16, 24, 27, 30], start=1):
        now[0] = step * 0.1
        cb.on_progress(node, "generating", step, 64, tokens)
    progress = [m for m in sent if isinstance(m, PhaseProgress)]
    assert [p.done for p in progress] == [1, 4]  # the first, then one per PROGRESS_EVERY
    last = progress[-1]
    assert (last.tokens, last.total, last.rows, last.finished) == (27, 64, 8, 5)
    cb.on_phase(node, "training")
    for k in range(3):  # every micro-batch is reported: each one takes seconds
        cb.on_progress(node, "training", k, 3, 0)
    assert [(p.phase, p.done) for p in sent if isinstance(p, PhaseProgress)][-3:] == [
        ("training", 0),
        ("training", 1),
        ("training", 2),
    ]


def test_a_round_that_trains_nothing_says_why_and_what_to_change(tmp_path):
    # every scripted completion right (right=4 of 4): all groups alike at reward 1
    node = make_node(make_cfg(tmp_path), "a", NullTransport(), right=4)
    sent = []
    node.callback = TuiCallback(sent.append)
    node.run_round()
    (idle,) = [m for m in sent if isinstance(m, NothingTrained)]
    assert "all 2 groups scored alike (reward 1)" in idle.why
    assert "no peer groups have arrived" in idle.why
    assert "--domain-configs" in idle.fix and "--group-size" in idle.fix
    # one right answer per group: it trains, and nothing is said
    node.backend.right = 1
    sent.clear()
    node.run_round()
    assert not [m for m in sent if isinstance(m, NothingTrained)]


def _report(local_used=0, external_used=0, received=0, i=4, j=4):
    """A round's report as the trainer writes it (its own I and J: local_target, external_target)."""
    return SimpleNamespace(
        local_used=local_used,
        external_used=external_used,
        received=received,
        pool={},
        local_target=i,
        external_target=j,
    )


def test_nothing_trained_reasons_follow_the_scores_and_settings(tmp_path):
    cfg = make_cfg(tmp_path)
    untagged = scored("g", TaskRef.make("bf", {}, 1, 0), "q", ["12", "no idea"], [0, 0], "self")
    why, fix = why_nothing_trained(_report(), [untagged, untagged], cfg)
    assert why.startswith("all 2 groups scored alike (reward 0): the model never wrote <answer>")
    assert "--lenient" in fix
    lenient = dataclasses.replace(cfg, lenient=True)
    why, fix = why_nothing_trained(_report(), [untagged], lenient)
    assert "every answer was wrong" in why and "easier --domain-configs" in fix
    tagged = scored(
        "h", TaskRef.make("bf", {}, 1, 1), "q", ["<answer>3</answer>"] * 2, [0, 0], "self"
    )
    assert "every answer was wrong" in why_nothing_trained(_report(), [tagged], cfg)[0]
    mixed = [untagged, scored("k", TaskRef.make("bf", {}, 1, 2), "q", ["a", "b"], [1, 1], "self")]
    why, fix = why_nothing_trained(_report(), mixed, cfg)
    assert "scored alike inside itself" in why and "--group-size" in fix
    no_own = dataclasses.replace(cfg, local_samples=0)
    why, fix = why_nothing_trained(_report(received=3, i=0), [untagged], no_own)
    assert why.startswith("I=0") and "no peer group was usable" in why and "Raise I" in fix
    assert why_nothing_trained(_report(local_used=1), [untagged], cfg) is None
    # issue 57: a run whose earlier rounds earned rewards is not told the questions are too hard
    why, fix = why_nothing_trained(_report(), [tagged], cfg, earlier_best=0.94)
    assert "after rounds whose mean reward reached 0.94" in why
    assert "too hard" not in fix and "--model" not in fix


def test_the_networked_node_passes_progress_on_to_the_dashboard():
    from sapo_edge.run.runner import _NetStatus

    got = []

    class Inner:
        def on_progress(self, node, phase, done, total, tokens):
            got.append((phase, done, total, tokens))

    _NetStatus(Inner(), NullTransport()).on_progress(None, "generating", 3, 256, 192)
    assert got == [("generating", 3, 256, 192)]


def test_round_done_carries_the_chosen_j_only_for_an_adaptive_node(tmp_path):
    for mix, expected in (("adaptive", {0}), ("fixed", {None})):
        cfg = make_cfg(tmp_path / mix, mix=mix, questions_per_round=4)
        node = make_node(cfg, "a", NullTransport())
        sent = []
        node.callback = TuiCallback(sent.append)
        for _ in range(3):
            node.run_round()
        chosen = {m.external_target for m in sent if isinstance(m, RoundDone)}
        assert chosen == expected  # adaptive without peers: J = 0, the only J it is offered


def test_an_unexpected_error_is_told_apart_by_its_kind_and_says_where_its_traceback_is():
    from sapo_edge.config.settings import ConfigError
    from sapo_edge.run.remedies import unexpected

    assert unexpected(RuntimeError("boom")) and not unexpected(ConfigError("bad"))
    title, remedy = explain(RuntimeError("boom"), traceback_at="/tmp/x.txt")
    assert title == "Unexpected error: RuntimeError" and "traceback is in /tmp/x.txt;" in remedy


def test_the_peers_claimed_reward_is_on_the_round_report_for_every_watcher(tmp_path):
    """Issue 55: the dashboard's bridge drained the trainer's tally of claimed rewards, so a
    second watcher of the same node saw none; the round's report now carries it."""
    from sapo_edge.swarm.transport import InProcessHub
    from sapo_edge.tui.bridge import TuiCallback
    from sapo_edge.tui.messages import RoundDone

    hub = InProcessHub()
    peer = make_node(make_cfg(tmp_path / "p"), "p", hub.connect("id-p"), right=2)
    node = make_node(make_cfg(tmp_path / "n"), "n", hub.connect("id-n"))
    peer.run_round()
    report = node.run_round()
    assert report.claimed_reward is not None and 0 < report.claimed_reward <= 1
    seen = []
    for _ in range(2):  # two watchers of one node
        posted = []
        cb = TuiCallback(posted.append)
        cb.node = node
        cb.on_round(report)
        seen += [m.swarm_reward for m in posted if isinstance(m, RoundDone)]
    assert seen == [report.claimed_reward] * 2
