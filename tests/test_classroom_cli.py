"""`sapo-edge join CODE` on the command line with the tiny model against a host on loopback: a
student trains with the class's settings (mDNS off: the code's address is all it has), its
rounds reach the host's board, and when it leaves and joins again it continues its own run and
keeps one row; a wrong code, a laptop too small for the class and bad host flags each end in
one sentence with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_sim import FAST

from sapo_edge.classroom.host import ClassHost, HostOptions
from sapo_edge.classroom.join import account_name
from sapo_edge.cli import build_parser, config_from_args, main
from sapo_edge.data.paths import runs_dir
from sapo_edge.run.runs import list_runs
from sapo_edge.swarm.identity import Identity, load_or_create

pytestmark = pytest.mark.slow


def start_host(tmp_path: Path, *flags: str) -> ClassHost:
    argv = ["host", "--out-dir", str(tmp_path / "class"), "--no-mdns", "--listen", "127.0.0.1:0"]
    cfg = config_from_args(build_parser().parse_args([*argv, *flags]))
    opts = HostOptions(address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web="")
    opts.train = False
    return ClassHost(cfg, opts, identity=Identity.generate(), log=lambda _m: None).start()


def test_a_student_joins_by_code_trains_and_rejoins_keeping_its_row(tiny_qwen, tmp_path, capsys):
    host = start_host(tmp_path, "--model", "smollm2-135m", *FAST, "--rounds", "50")
    try:
        argv = ["join", host.code, "--headless", "--model", str(tiny_qwen), "--no-mdns"]
        argv += ["--listen", "127.0.0.1:0", "--leave-when-done"]
        assert main([*argv, "--rounds", "2"]) == 0
        out, err = capsys.readouterr()
        me = load_or_create()[0]  # the student's identity (this test's SAPO_EDGE_HOME)
        assert f"joined {host.transport.name}'s class: basic_arithmetic · 2 questions x G=3" in err
        assert "class runs smollm2-135m" in err  # its own --model, and it says so
        assert f"train more sapo-edge join {host.code} --headless --model" in out

        def rounds_here(n: int) -> bool:
            m = host.board.members.get(me.node_id)
            return m is not None and len(m.rounds) == n

        assert host.transport.wait_for(lambda: rounds_here(2), 10), "rounds never reached the host"
        # its name in the class: this computer's account name (issue 57), said on joining
        name = account_name() or me.name
        assert f"your name in the class: {name}" in err or not account_name()
        folder = runs_dir() / f"class-{host.transport.keys.lan_id[:12]}" / name
        saved = json.loads((folder / "config.json").read_text())
        assert saved["group_size"] == 3 and saved["room"] == "class" and "secret" not in saved
        assert host.admissions.grant.secret not in (folder / "config.json").read_text()

        assert main([*argv, "--rounds", "3"]) == 0  # the laptop comes back
        out, err = capsys.readouterr()
        assert f"rejoining: continuing this laptop's run in {folder}" in err
        assert "resumed from round-000002: next round 2" in out
        assert host.transport.wait_for(lambda: rounds_here(3), 10)
        rows = [r for r in host.board.snapshot().members if r.node_id == me.node_id]
        assert len(rows) == 1 and [r for r, _ in host.board.snapshot().curves[me.node_id]] == [
            1,
            2,
            3,
        ]
        metrics = (folder / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(m)["round"] for m in metrics] == [0, 1, 2]
        (listed,) = list_runs(runs_dir())  # `sapo-edge runs`: rejoin with the code, not `run`
        assert listed.rounds == 3 and listed.resume.startswith("sapo-edge join CODE")
    finally:
        host.close()


def test_a_wrong_code_ends_in_one_sentence_and_sets_nothing_up(tmp_path, capsys) -> None:
    host = start_host(tmp_path, "--model", "smollm2-135m", *FAST)
    try:
        words, _, where = host.code.partition("@")
        n, w1, w2 = words.split("-")
        wrong = f"{n}-{w2}-{w1}@{where}" if w1 != w2 else f"{n}-acorn-acorn@{where}"
        assert main(["join", wrong, "--headless"]) == 2
        out, err = capsys.readouterr()
        assert err.startswith("sapo-edge: error: the host refused this code: wrong code.")
        assert "Traceback" not in err and out == ""
        assert not runs_dir().exists() or not any(runs_dir().iterdir())
        assert main(["join", f"{n}-{w1}-{w2}@127.0.0.1:1", "--headless"]) == 2
        err = capsys.readouterr().err  # issue 48: an ended class's code, said as such first
        assert "cannot reach the host at 127.0.0.1:1: the class may have ended" in err
        assert main(["join"]) == 2  # issue 48: no code: where it comes from, not argparse's
        err = capsys.readouterr().err
        assert err.startswith("sapo-edge: error: join needs the class's code: the teacher runs")
        assert "sapo-edge join 7-acorn-zinnia@192.168.1.20:7745" in err
    finally:
        host.close()


def test_a_laptop_too_small_for_the_class_says_so_before_loading(tmp_path, capsys, monkeypatch):
    from sapo_edge.machine import fit

    host = start_host(tmp_path, "--preset", "paper")  # Qwen2.5-0.5B at the paper's settings
    monkeypatch.setattr(fit, "system_memory", lambda: fit.Memory(4e9, 3e9, "RAM"))
    try:
        assert main(["join", host.code, "--headless"]) == 2
        err = capsys.readouterr().err
        assert "the class's settings need about" in err and "this laptop has 4.0 GB" in err
        assert "--model smollm2-135m" in err and "Traceback" not in err
        assert not runs_dir().exists() or not any(runs_dir().iterdir())
    finally:
        host.close()


def test_bad_host_and_join_flags_end_in_one_sentence(tmp_path, capsys) -> None:
    out = ["--out-dir", str(tmp_path / "c")]
    assert main(["host", "--secret-file", "x", *out]) == 2
    assert "fresh room key" in capsys.readouterr().err
    assert main(["host", "--solo", *out]) == 2
    assert "a class is a swarm" in capsys.readouterr().err
    assert main(["join", "7-acorn-zinnia", "--headless"]) == 2
    assert "no host address" in capsys.readouterr().err
    for flags, says in [
        (["--web", "localhost"], "IP:PORT"),
        (["--code-minutes", "0"], "positive"),
        (["--address", "bad address"], "IP address or name"),
        (["--address", "192.168.1.20:7745"], "IP address or name"),  # the port is not its part
        (["--web", "projector:7746"], "IP:PORT"),  # a name: refused now, not a later lookup
        (["--relay-port", "70000"], "between 1 and 65535"),
        (["--web", "::1:7746"], "[::1]:7746"),  # an IPv6 address without its brackets
        (["--preset", "aha", "--no-train"], "e.g. --hint 2"),  # the example would go to nobody
    ]:
        assert main(["host", *flags, *out]) == 2
        assert says in capsys.readouterr().err


def test_joining_again_from_a_second_window_is_refused_while_the_first_runs(
    tiny_qwen, tmp_path, capsys
) -> None:
    """A student who opens a second terminal and joins again (the first seemed stuck) must not
    train a second process into the same folder under the same identity."""
    import subprocess
    import sys

    from sapo_edge.run.runs import RUNNING_FILE

    host = start_host(tmp_path, "--model", "smollm2-135m", *FAST)
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    node_dir = tmp_path / "student" / "ada"
    try:
        node_dir.mkdir(parents=True)
        (node_dir / RUNNING_FILE).write_text(str(first.pid))  # the first window's mark
        argv = ["join", host.code, "--headless", "--out-dir", str(tmp_path / "student")]
        argv += ["--model", str(tiny_qwen), "--name", "ada", "--rounds", "0", "--leave-when-done"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"in use by another sapo-edge (process {first.pid})" in err
        assert "Traceback" not in err and not (node_dir / "metrics.jsonl").exists()
        first.kill()
        first.wait()
        assert main(argv) == 0  # a dead holder's mark is stale
    finally:
        first.kill()
        host.close()


def test_joining_from_the_hosts_laptop_under_its_identity_is_refused(tmp_path, capsys) -> None:
    """A teacher trying `join` in a second window of the laptop that hosts: one identity twice
    took the host's place at its own relay (each refused the other); now one sentence says how
    to try it (an identity of its own for that window)."""
    import subprocess
    import sys

    from sapo_edge.data.paths import identity_path

    host = start_host(tmp_path, "--model", "smollm2-135m", *FAST)
    hosting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        load_or_create()  # this laptop's identity, as `host` loaded it
        mark = identity_path().with_name(identity_path().name + ".in-use")
        mark.write_text(str(hosting.pid))  # the host process's mark
        argv = ["join", host.code, "--headless", "--out-dir", str(tmp_path / "s")]
        assert main([*argv, "--rounds", "0"]) == 2
        err = capsys.readouterr().err
        assert f"in use by another sapo-edge in a class (process {hosting.pid})" in err
        assert "SAPO_EDGE_HOME=" in err and "Traceback" not in err
        assert not (tmp_path / "s").exists()
    finally:
        hosting.kill()
        host.close()


def test_a_headless_student_whose_rounds_are_done_stays_to_hear_the_end(
    tiny_qwen, tmp_path, capsys
):
    """Issue 57: headless students whose rounds were done exited, so they were never told the
    class ended (the host said "2 links" for 3 students). One now stays in the class after its
    rounds, linked, until the teacher's q reaches it, then exits 0 and says so."""
    import threading

    host = start_host(tmp_path, "--model", "smollm2-135m", *FAST, "--rounds", "50")
    try:
        argv = ["join", host.code, "--headless", "--model", str(tiny_qwen), "--no-mdns"]
        argv += ["--listen", "127.0.0.1:0", "--rounds", "1"]
        me = load_or_create()[0]  # made before the student's run loads it (no race to make it)
        got: list[int] = []
        student = threading.Thread(target=lambda: got.append(main(argv)), daemon=True)
        student.start()

        def done() -> bool:
            m = host.board.members.get(me.node_id)
            return m is not None and len(m.rounds) == 1

        assert host.transport.wait_for(done, 60), "the student's round never came"
        student.join(3)
        assert student.is_alive() and not got  # its round is done: it stays in the class
        assert host.goodbye() >= 1  # the teacher's q reaches it
        student.join(20)
        assert got == [0]
        out, err = capsys.readouterr()
        stay = out.index("stays in the class until the teacher ends it")
        ended = out.index("The class has ended", stay)  # told, after its summary
        assert "rounds are done and saved: it leaves" in out[ended:]
    finally:
        host.close()


def test_a_student_without_a_name_takes_the_account_name_cleaned(monkeypatch) -> None:
    """Issue 57: students got random names unless they passed --name, and nothing said so."""
    import getpass

    monkeypatch.setattr(getpass, "getuser", lambda: "ada.lovelace [lab 3]\x1b]0;x")
    assert account_name() == "adalovelacelab30x"
    monkeypatch.setattr(getpass, "getuser", lambda: "x" * 99)
    assert account_name() == "x" * 40

    def no_user() -> str:
        raise OSError("no user")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert account_name() == ""
