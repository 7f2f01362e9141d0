"""The teacher removes a member (issue 57): every member drops its links, discards its queued and
pooled groups and trains on none of its groups afterwards; the removed laptop is told and how to
train alone; the view and page no longer list it, the report keeps its rows marked; its identity
is refused at admission until the teacher lets it back. A member's forged word is not heeded, and
a member that joins after the removal hears it too (the host says it again)."""

from __future__ import annotations

import json

import pytest
import test_classroom
from scripted import Quiet
from swarm_util import group
from test_classroom import linked, node_of, run_rounds_in_step, student

from sapo_edge.classroom import removal
from sapo_edge.classroom.join import JoinError, join_class
from sapo_edge.classroom.removal import find_member, teacher_line
from sapo_edge.data.rollout import RolloutGroup
from sapo_edge.rl.pool import ExternalPool
from sapo_edge.swarm.identity import Identity
from sapo_edge.swarm.inbox import FairInbox
from sapo_edge.swarm.progress import Progress, ProtocolError

host = test_classroom.host


def _learned_from(host_board, learner: str, producer: str, since_round: int) -> int:
    m = host_board.members[learner]
    return sum(s.learned.get(producer, (0, 0))[0] for r, s in m.rounds.items() if r >= since_round)


def test_a_removed_member_is_dropped_by_every_member_told_and_refused_until_readmitted(
    host, tmp_path
) -> None:
    idents = {n: Identity.generate() for n in ("ada", "bob", "cy")}
    joined = {n: student(host, tmp_path, n, idents[n]) for n in idents}
    host_node = node_of(host.cfg, host.transport, "teacher", host.member_callback(Quiet()))
    nodes = {"teacher": host_node}
    nodes |= {n: node_of(j.cfg, j.transport, n, j.callback(Quiet())) for n, j in joined.items()}
    for j in joined.values():
        j.transport.start()
    cy = idents["cy"].node_id
    try:
        for j in joined.values():
            linked(j)
        run_rounds_in_step(list(nodes.values()), host, 3)  # the class trains on cy's groups
        learners = [nodes[n].node_id for n in ("teacher", "ada", "bob")]
        assert sum(_learned_from(host.board, who, cy, 0) for who in learners) > 0
        for t in [n.transport for n in nodes.values()]:  # cy's newest batch has arrived
            assert t.wait_for(lambda t=t: t.counters["delivered"] >= 9, 10)
        for name in ("teacher", "ada"):  # one takes it into its pool, one leaves it queued
            nodes[name]._receive()
        assert any(e.group.producer == cy for e in host_node.pool._pool.values())
        assert any(s == cy for s, _ in nodes["bob"].transport.intake.inbox.items)

        said = host.remove("cy")
        assert said.startswith("removed cy from the class") and "readmit cy" in said
        ada, bob = joined["ada"], joined["bob"]
        for j in (ada, bob):  # each hears the host's word (cy stays in the class's network)
            assert j.transport.wait_for(lambda j=j: cy in j.removals, 10)
        assert joined["cy"].removed.wait(10)  # the removed laptop is told
        assert "removed this laptop" in joined["cy"].continue_command(headless=True, more=False)

        # cy goes on publishing (its pace allowing it here): every other member refuses them
        from sapo_edge.swarm.publish_pace import PublishPace

        joined["cy"].transport.pace = PublishPace(joined["cy"].transport.core, 600)
        before = {
            n: nodes[n].transport.counters["dropped_removed"] for n in ("teacher", "ada", "cy")
        }
        start = host_node.round
        cy_got = []
        for _ in range(2):
            for name, n in nodes.items():
                report = n.run_round()
                if name == "cy":
                    cy_got.append((report.received, report.external_used))
            for name in ("teacher", "ada", "bob"):
                t = nodes[name].transport
                assert t.wait_for(lambda t=t: t.counters["delivered"] > 0, 10)
        for name in ("teacher", "ada"):
            t = nodes[name].transport
            assert t.wait_for(lambda t=t, n=name: t.counters["dropped_removed"] > before[n], 10), (
                name,
                dict(t.counters),
                dict(nodes["cy"].transport.counters),
                before,
            )
        for name in ("teacher", "ada"):
            assert nodes[name].pool.stats()["removed"] >= 1, nodes[name].pool.stats()
        assert nodes["bob"].transport.counters["dropped_removed"] >= 1  # its queued batch went
        for name in ("teacher", "ada", "bob"):
            assert all(e.group.producer != cy for e in nodes[name].pool._pool.values())
        for name in ("ada", "bob"):  # nobody trained on cy's groups after the removal
            learner = nodes[name].node_id
            assert host.transport.wait_for(
                lambda learner=learner: max(host.board.members[learner].rounds) >= start + 1, 10
            )
            assert _learned_from(host.board, learner, cy, start) == 0
        ht = host.transport  # (it hangs up a moment after: its word to cy goes first)
        assert ht.wait_for(lambda: cy not in {p.node_id for p in ht.peers() if p.connected}, 10)
        # and the removed laptop takes nothing of the class's any more: it trains alone (what
        # reaches it by the relay is sealed under the room's new key: it does not even open)
        cyt = joined["cy"].transport
        assert cyt.wait_for(
            lambda: cyt.counters["dropped_removed"] > before["cy"]
            or cyt.counters["rejected:wrong_secret"] > 0,
            10,
        )
        assert cy_got[1:] == [(0, 0)], cy_got
        assert len(nodes["cy"].pool) == 0

        # the view and the page no longer list it; the report keeps its rows, marked
        assert cy not in {m.node_id for m in host.board.snapshot().members}
        assert cy not in json.dumps(host.class_json())
        kept = {m.node_id: m for m in host.board.snapshot(removed=True).members}
        assert kept[cy].removed and kept[cy].rounds >= 2
        lines = (host.out_dir / "class.jsonl").read_text().splitlines()
        assert any(json.loads(x).get("removed") == cy for x in lines)
        from sapo_edge.classroom.report import load_class

        snap, _info = load_class(host.out_dir)
        assert {m.node_id: m.removed for m in snap.members}[cy] is True

        # its identity is refused at admission, until the teacher lets it back
        local = dict(out_dir=str(tmp_path / "again"), name="cy", listen="127.0.0.1:0", mdns=False)
        with pytest.raises(JoinError, match="removed this laptop"):
            join_class(host.code, local, identity=idents["cy"], log=lambda _m: None)
        assert host.remove("cy", removed=False).startswith("cy may join the class again")
        for j in (ada, bob):
            assert j.transport.wait_for(lambda j=j: cy not in j.removals, 10)
        assert cy in {m.node_id for m in host.board.snapshot().members}
        back = join_class(host.code, local, identity=idents["cy"], log=lambda _m: None)
        back.transport.close()
    finally:
        for j in joined.values():
            j.transport.close()


def test_a_members_forged_word_is_not_heeded_and_a_latecomer_hears_the_removal(
    host, tmp_path, monkeypatch
) -> None:
    ada, bob = student(host, tmp_path, "ada"), student(host, tmp_path, "bob")
    for j in (ada, bob):
        j.transport.start()
        linked(j)
    dan = None
    try:
        # bob says "ada is removed" as if it were the host: nobody heeds it
        forged = Progress("removed", name="teacher", member=ada.transport.ident.node_id)
        bob.transport.stats.announce(forged)
        code = host.new_code()  # a word of the host's after it, to know bob's has arrived
        assert ada.transport.wait_for(lambda: ada.code_in_force == code, 10)
        assert not ada.removed.is_set() and not list(bob.removals.out)

        monkeypatch.setattr(removal, "REPEAT_S", 0.2)
        host._repeater.stop()  # said again often, for this test
        host._repeater = removal.Repeater(host.words, lambda i, ph: removal.tell(host, i, ph))
        host.remove(bob.transport.ident.node_id[:8])  # (its forged word renamed its row)
        assert bob.removed.wait(10)
        dan = student(host, tmp_path, "dan")  # joins after the removal
        dan.transport.start()
        linked(dan)
        bob_id = bob.transport.ident.node_id
        assert dan.transport.wait_for(lambda: bob_id in dan.removals, 10)
    finally:
        for j in (ada, bob, dan):
            if j is not None:
                j.transport.close()


def _group_of(producer: str, rnd: int) -> RolloutGroup:
    return group(producer, rnd, index=rnd, completions=(f"{rnd + 3} ({producer[:4]})", "0"))


def test_the_pool_drops_and_refuses_a_removed_producer_until_let_back() -> None:
    pool = ExternalPool("me" + "0" * 30)
    a, b = "a" * 32, "b" * 32
    for r in range(3):
        assert pool.add(_group_of(a, r), r) and pool.add(_group_of(b, r), r)
    assert pool.refuse_producer(a) == 3
    assert len(pool) == 3 and pool.stats()["removed"] == 3
    assert not pool.add(_group_of(a, 4), 4) and pool.last_refusal == "removed"
    snap_before = pool.snapshot()
    pool.refuse_producer(b)
    pool.restore(snap_before)  # a stopped round puts back what it took: b's are back...
    taken = pool.sample(8, 4, lambda g: None, __import__("random").Random(0))
    assert taken == [] and pool.stats()["removed"] == 4 + 3  # ...but none is trained on
    pool.refuse_producer(a, False)
    assert pool.add(_group_of(a, 5), 5)


def test_the_inbox_purges_one_senders_batches() -> None:
    inbox = FairInbox(max_items=10)
    for _ in range(3):
        inbox.put("a", b"x" * 10)
        inbox.put("b", b"y" * 10)
    assert inbox.purge("a") == 3 and [s for s, _ in inbox.drain()] == ["b", "b", "b"]
    assert inbox.purge("nobody") == 0


def test_a_removal_word_is_checked_like_any_progress() -> None:
    ok = Progress("removed", member="c" * 32).to_json()
    assert Progress.from_json(ok).member == "c" * 32
    for bad in (
        {**ok, "member": "C" * 32},
        {**ok, "member": "c" * 31},
        {**ok, "member": ""},  # removed names whom
        {**ok, "phase": "training"},  # only removed/readmitted name a member
    ):
        with pytest.raises(ProtocolError):
            Progress.from_json(bad)


def test_the_teacher_names_a_member_as_the_view_shows_it() -> None:
    from types import SimpleNamespace as Row

    rows = [Row(node_id="h" * 32, name="teacher"), Row(node_id="ab12" + "0" * 28, name="Ada")]
    rows.append(Row(node_id="ab13" + "0" * 28, name="ada#ab1300"))
    assert find_member(rows, " ADA ", "h" * 32) == ("ab12" + "0" * 28, "Ada")
    assert find_member(rows, "ab130000", "h" * 32)[1] == "ada#ab1300"
    twins = [rows[1], Row(node_id="ab12" + "0" * 27 + "1", name="x")]
    with pytest.raises(ValueError, match="2 members match"):
        find_member(twins, "ab120000", "h" * 32)
    with pytest.raises(ValueError, match="no member is called"):
        find_member(rows, "zed", "h" * 32)
    with pytest.raises(ValueError, match="q ends the class"):
        find_member(rows, "teacher", "h" * 32)
    said = []
    fake = Row(remove=lambda who, out: said.append((who, out)) or "ok")
    assert teacher_line(fake, "remove Ada") == "ok" and said[-1] == ("Ada", True)
    assert teacher_line(fake, "READMIT ada#ab1300") == "ok" and said[-1] == ("ada#ab1300", False)
    assert teacher_line(fake, "Ada", default="remove") == "ok"
    for line in ("Ada", "remove", "kick Ada"):
        with pytest.raises(ValueError, match="remove NAME"):
            teacher_line(fake, line)


async def select_member(app, pilot, node_id: str):
    """Wait (bounded) until the class view's members table lists `node_id`, and select its row."""
    from sapo_edge.tui.widgets.class_widgets import MembersTable

    table = app.query_one(MembersTable)
    for _ in range(50):
        await pilot.pause(0.05)
        if node_id in [k.value for k in table.rows]:
            break
    table.move_cursor(row=[k.value for k in table.rows].index(node_id))
    return table


def test_x_in_the_class_view_removes_the_selected_member_and_esc_cancels(host, tmp_path) -> None:
    import asyncio

    from textual.widgets import Input

    from sapo_edge.tui.class_view import ClassView
    from sapo_edge.tui.screens.remove import RemoveScreen

    ada = student(host, tmp_path, "ada")
    ada_id = ada.transport.ident.node_id
    app = ClassView(host, start=False)

    async def drive() -> None:
        async with app.run_test(size=(140, 40)) as pilot:
            table = await select_member(app, pilot, ada_id)
            await pilot.press("x")
            await pilot.pause()
            assert isinstance(app.screen, RemoveScreen)
            assert app.screen.query_one(Input).value == "ada"  # the selected row's name
            await pilot.press("escape")  # cancelled: nothing happens
            await pilot.pause()
            assert not isinstance(app.screen, RemoveScreen) and ada_id not in host.removals
            await pilot.press("x")
            await pilot.pause()
            await pilot.press("enter")
            for _ in range(50):
                await pilot.pause(0.05)
                if ada_id not in [k.value for k in table.rows]:
                    break
            assert ada_id in host.removals
            assert ada_id not in [k.value for k in table.rows]  # the view lists it no more

    try:
        asyncio.run(drive())
    finally:
        ada.transport.close()


def test_a_headless_host_removes_and_readmits_by_a_line_on_its_input(host, tmp_path) -> None:
    import io

    from sapo_edge.classroom.removal import read_teacher_lines

    ada = student(host, tmp_path, "ada")
    try:
        said: list[str] = []
        lines = io.StringIO("remove nobody\n\nremove ada\nreadmit ada\nkick ada\n")
        read_teacher_lines(host, lines, said.append).join(10)
        assert len(said) == 4, said
        assert said[0].startswith("no member is called 'nobody'")
        assert said[1].startswith("removed ada from the class")
        assert said[2].startswith("ada may join the class again")
        assert said[3].startswith("type remove NAME")
        assert ada.transport.ident.node_id not in host.removals
    finally:
        ada.transport.close()
