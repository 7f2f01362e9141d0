"""The shared training loop and its RunControl: pause, save now, stop mid-round, new settings;
and the per-peer counts the dashboard shows (PeerTally / peer_snapshot)."""

import queue
import threading

from scripted import make_cfg, make_node

from sapo_edge.events import RunEvents
from sapo_edge.rl.metrics import read_rewards
from sapo_edge.run.control import RunControl, run_rounds
from sapo_edge.swarm.peers import PeerInfo, PeerTally, peer_snapshot
from sapo_edge.swarm.transport import InProcessHub, NullTransport


def _checkpoints(node):
    return sorted(p.name for p in node.checkpoint_dir.glob("round-*"))


def test_loop_runs_all_rounds_and_saves_at_the_end(tmp_path):
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    logs = []
    assert run_rounds(node, 3, None, logs.append) == "done"
    assert node.round == 3 and len(read_rewards(node.metrics_path)) == 3
    assert _checkpoints(node) == ["round-000003"]
    assert any(line.startswith("checkpoint saved") for line in logs)


class StopAt:
    """A callback that asks the control to stop when a given phase of a given round starts."""

    def __init__(self, control, round_, phase):
        self.control, self.round, self.phase, self.phases = control, round_, phase, []

    def on_round(self, r):
        pass

    def on_message(self, node, text):
        pass

    def on_phase(self, node, phase):
        self.phases.append((node.round, phase))
        if (node.round, phase) == (self.round, self.phase):
            self.control.request_stop()


def test_stop_abandons_the_round_in_flight_and_saves(tmp_path):
    control = RunControl()
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    node.callback = cb = StopAt(control, 2, "scoring")
    assert run_rounds(node, 10, control, lambda _: None) == "stopped"
    # round 2 got as far as scoring, then stopped before training: no metrics, no weights step
    assert (2, "training") not in cb.phases and (2, "scoring") in cb.phases
    assert node.round == 2 and len(read_rewards(node.metrics_path)) == 2
    assert len(node.backend.steps) == 2
    assert _checkpoints(node) == ["round-000002"]
    assert cb.phases[-1] == (2, "saving")


def test_pause_parks_between_rounds_saves_on_request_and_resumes(tmp_path):
    control = RunControl(paused=True)
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    logs: queue.Queue[str] = queue.Queue()
    parks = []
    control.on_park = parks.append
    result = []
    t = threading.Thread(target=lambda: result.append(run_rounds(node, 2, control, logs.put)))
    t.start()
    try:
        assert control.parked.wait(10)
        assert node.round == 0 and not node.metrics_path.exists()  # nothing ran while paused
        control.request_save()
        assert logs.get(timeout=10).startswith("checkpoint saved")
        assert _checkpoints(node) == ["round-000000"] and node.round == 0
        control.resume()
    finally:
        control.resume()
        t.join(30)
    assert result == ["done"] and node.round == 2 and parks == [True, False]


def test_settings_apply_from_the_next_round_and_bad_ones_are_refused(tmp_path):
    control = RunControl()
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    logs = []
    control.update(external_samples=0, room="lab")
    assert control.pending_settings() == {"external_samples": 0, "room": "lab"}
    run_rounds(node, 1, control, logs.append)
    assert node.cfg.external_samples == 0 and node.cfg.local_samples == 2
    assert any("external_samples=0" in m for m in logs)
    assert any(m.startswith("room") and "restart" in m for m in logs)
    assert node.cfg.room != "lab"  # the transport owns the room: not silently written into cfg
    control.update(local_samples=99)  # more than questions_per_round
    run_rounds(node, 2, control, logs.append)
    assert node.cfg.local_samples == 2
    assert any(m.startswith("settings not applied") and "local_samples" in m for m in logs)


class Notices(RunEvents):
    def __init__(self) -> None:
        self.notices: list[tuple[str, str]] = []

    def on_notice(self, node: str, text: str) -> None:
        self.notices.append((node, text))


def test_a_save_and_settings_reach_the_watchers_as_notices_as_well_as_the_log(tmp_path):
    """What the dashboard pops up is a typed event the loop sends, not a log line picked by its
    first words: each notice is one of the log's lines, about this node."""
    control = RunControl()
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    watcher = Notices()
    node.callback = watcher
    logs: list[str] = []
    control.update(external_samples=0, room="lab")
    control.request_save()
    run_rounds(node, 1, control, logs.append)
    control.update(local_samples=99)
    run_rounds(node, 2, control, logs.append)
    said = [t for _n, t in watcher.notices]
    assert {n for n, _t in watcher.notices} == {node.name}
    assert said == logs  # each notice is in the log too, in order
    assert any(t.startswith("checkpoint saved: ") for t in said)
    assert any(t.startswith("settings applied from this round: external_samples=0") for t in said)
    assert any(t.startswith("room: this node's transport") and "restart" in t for t in said)
    assert any(t.startswith("settings not applied") and "local_samples" in t for t in said)


def test_peer_tally_counts_received_accepted_rejected_per_producer(tmp_path):
    cfg = make_cfg(tmp_path)
    hub = InProcessHub()
    a = make_node(cfg, "a", Recording(hub.connect("id-a")))
    b = make_node(cfg, "b", hub.connect("id-b"))
    a.run_round()
    a.transport.publish(a.transport.sent[0])  # the same two groups again: duplicates
    hub._broadcast("id-x", b"{not json")
    report = b.run_round()
    rows = {p.node_id: p for p in b.peer_tally.snapshot()}
    assert rows["id-a"].received == 4 and rows["id-a"].accepted == 2
    assert rows["id-a"].rejected == 2 and rows["id-a"].top_rejection == "duplicate (2)"
    assert rows["id-a"].model == "scripted" and rows["id-a"].claimed_reward == 0.25
    assert rows["id-x"].rejected == 1 and rows["id-x"].received == 0
    assert report.claimed_reward == 0.25 and b.peer_tally.take_claimed() == []  # on the report
    # no transport view: the tally is the snapshot
    assert peer_snapshot(b.transport, b.peer_tally) == b.peer_tally.snapshot()


class Recording:
    """A transport that keeps what it published, to send the same bytes again."""

    def __init__(self, inner):
        self.inner, self.sent = inner, []

    def publish(self, payload):
        self.sent.append(payload)
        self.inner.publish(payload)

    def receive(self):
        return self.inner.receive()

    def describe(self):
        return self.inner.describe()


def test_a_transport_with_its_own_peer_view_wins():
    class Lan:
        def peers(self):
            return [PeerInfo("id-z", name="zed", connection="lan", received=3, accepted=3)]

    assert [p.name for p in peer_snapshot(Lan(), PeerTally())] == ["zed"]

    class Broken:
        def peers(self):
            raise RuntimeError("boom")

    tally = PeerTally()
    tally.group("id-q", "m", (1.0,), True)
    assert [p.node_id for p in peer_snapshot(Broken(), tally)] == ["id-q"]


class StopInside:
    """A callback that asks the control to stop at a given progress point inside a phase."""

    def __init__(self, control, round_, phase, at):
        self.control, self.round, self.phase, self.at = control, round_, phase, at
        self.progress: list[tuple[int, str, int, int, int]] = []

    def on_round(self, r):
        pass

    def on_message(self, node, text):
        pass

    def on_progress(self, node, phase, done, total, tokens):
        self.progress.append((node.round, phase, done, total, tokens))
        if (node.round, phase, done) == (self.round, self.phase, self.at):
            self.control.request_stop()


def test_a_stop_mid_generation_abandons_it_at_the_next_decode_step(tmp_path):
    control = RunControl()
    node = make_node(make_cfg(tmp_path, max_new_tokens=64), "a", NullTransport())
    node.callback = cb = StopInside(control, 1, "generating", 2)
    logs = []
    assert run_rounds(node, 10, control, logs.append) == "stopped"
    # the scripted backend reports 5 decode steps; step 3 never ran: the stop was seen at step 2's
    # report (the next check) and generation ended there
    gen_steps = [done for r, phase, done, _, _ in cb.progress if (r, phase) == (1, "generating")]
    assert gen_steps == [1, 2]
    assert any("stopped while generating" in line for line in logs)
    assert node.round == 1 and len(read_rewards(node.metrics_path)) == 1  # round 1 left no trace
    assert len(node.backend.steps) == 1
    assert _checkpoints(node) == ["round-000001"]  # the last finished round, saved


def test_a_stop_inside_the_train_step_keeps_no_update(tmp_path):
    control = RunControl()
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    # asked after the last decode step: the train step's check (before its first micro-batch)
    # is the next one, so the round's generation is complete but nothing is trained
    node.callback = cb = StopInside(control, 0, "generating", 5)
    assert run_rounds(node, 10, control, lambda _: None) == "stopped"
    assert cb.progress[-1][:3] == (0, "generating", 5)
    assert node.backend.steps == [] and not node.metrics_path.exists()
    assert _checkpoints(node) == []  # no round finished: nothing worth a checkpoint


def test_the_final_save_writes_only_what_is_newer_than_the_last_checkpoint(tmp_path):
    control = RunControl()
    node = make_node(make_cfg(tmp_path, checkpoint_every=2), "a", NullTransport())
    node.callback = StopInside(control, 2, "generating", 1)
    logs = []
    assert run_rounds(node, 10, control, logs.append) == "stopped"
    # round 2 was saved by checkpoint_every when it began; stopping in it saves nothing again
    assert _checkpoints(node) == ["round-000002"]
    assert sum(line.startswith("checkpoint saved") for line in logs) == 0
    assert control.node is node and control.start_round == 0 and control.outcome == "stopped"
    assert node.saved[0] == 2


def test_applied_settings_are_kept_for_a_resumed_run(tmp_path):
    control = RunControl()
    node = make_node(make_cfg(tmp_path), "a", NullTransport())
    control.update(external_samples=0)
    run_rounds(node, 1, control, lambda _: None)
    from sapo_edge.config.settings import Config

    assert Config.load(node.out_dir / "config.json").external_samples == 0


def test_stop_signals_reach_the_run_and_the_old_handlers_come_back():
    import os
    import signal

    from sapo_edge.run.stopping import exit_code, stop_signals

    names = [n for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
    before = {n: signal.getsignal(getattr(signal, n)) for n in names}
    got = []
    with stop_signals(got.append) as received:
        for n in names:
            os.kill(os.getpid(), getattr(signal, n))  # handlers run before kill() returns here
    assert got == names and received == names  # none of them ended this process
    assert {n: signal.getsignal(getattr(signal, n)) for n in names} == before
    assert exit_code("SIGINT") == 130 and exit_code("SIGTERM") == 143
