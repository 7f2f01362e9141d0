"""What a student is told (issue 48). In its first minute: its header names the paths into the
class (not its node's relay counts), its links name the host's address, its peers see its
backend. At the end: the class ended, within seconds and whatever classmates are still linked
(the dashboard's banner stays through rounds that still receive groups, its header says it;
with real processes on a LAN in network namespaces, a host stopped with `q`, a student in the
dashboard under tmux and one headless). After it, no dead ends: the exit summary prints the
code in force (the host's newer one after its n), or none once the class has ended and how to
go on alone."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import test_classroom
from swarm_util import fake_paths
from test_classroom import linked, student

from sapo_edge.classroom.code import parse_code
from sapo_edge.classroom.join_status import CLASS_ENDED_TITLE, PathWatcher, class_ended_remedy
from sapo_edge.config.settings import Config
from sapo_edge.swarm.peers import PeerInfo
from sapo_edge.tui.app import SapoDashboard
from sapo_edge.tui.bridge import NO_PEERS_TITLE
from sapo_edge.tui.messages import Problem, RoundDone
from sapo_edge.tui.widgets.problem import ProblemBanner

host = test_classroom.host  # the class on loopback's fixture
ROOT = Path(__file__).resolve().parent.parent


def _round(r: int, received: int) -> RoundDone:
    return RoundDone(r, 0.2, None, {}, 10, 1.0, 2.0, 0.0, 1.0, 2, 2, received, 4)


def test_the_class_ended_banner_stays_through_rounds_that_still_receive_groups() -> None:
    """Issue 48: a round that received groups (from a classmate still running) hid every
    warning, so the class's end showed for one round at most, often not at all. Only "no peers
    yet" is over when groups arrive."""
    app = SapoDashboard(Config(), start=False)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            banner = app.query_one(ProblemBanner)
            app.post_message(Problem(NO_PEERS_TITLE, "check the room", fatal=False))
            app.post_message(_round(0, 3))
            await pilot.pause()
            assert not banner.display  # groups arrived: no peers yet is over
            app.post_message(Problem(CLASS_ENDED_TITLE, class_ended_remedy("q"), fatal=False))
            for r in (1, 2):
                app.post_message(_round(r, 4))
            await pilot.pause()
            assert banner.display and banner.problem.title == CLASS_ENDED_TITLE
            assert "q stops it now" in str(banner.render())

    asyncio.run(drive())


def test_the_header_says_the_class_ended_while_classmates_are_still_linked() -> None:
    """Issue 48: the header kept 'in the class via the LAN (1 peer)' after the host's q (a
    classmate was still linked): it says the class ended, and what still links this laptop."""
    classmate = PeerInfo(node_id="b" * 32, connection="lan")
    transport = SimpleNamespace(
        port=1,
        closed=False,
        mdns=True,
        counters=Counter(),
        connected=lambda: [classmate.node_id],
        peers=lambda: [classmate],
        paths=lambda: fake_paths([classmate.node_id], [classmate]),
    )
    joined = SimpleNamespace(
        transport=transport,
        code=parse_code("7-acorn-zinnia@192.168.1.20:7745"),
        relay="",
        host_address="192.168.1.20:7744",
        invite=SimpleNamespace(node_port=7744, relay_port=7745),
        class_ended=threading.Event(),
        removed=threading.Event(),
    )
    said: list[str] = []
    changed = threading.Event()
    watcher = PathWatcher(
        joined, lambda t: (said.append(t), changed.set()), lambda *_a: None, every=0.01
    ).start()
    try:
        assert changed.wait(10)
        changed.clear()
        joined.class_ended.set()
        assert changed.wait(10)
    finally:
        watcher.stop()
    assert said == [
        "class: in the class via the LAN (1 peer)",
        "class: the class has ended (the teacher's q); still linked to classmates via the LAN "
        "(1 peer)",
    ]


def test_a_students_header_names_its_paths_into_the_class_from_the_first_second() -> None:
    """Issue 48: the header said 'relay up, 0 more heard through it in 5 min' in the first
    minute: the paths said while the model loaded were replaced by the node's own counts."""
    from tui_recorded import node_started

    from sapo_edge.tui.messages import LogLine, PathChanged
    from sapo_edge.tui.widgets.header import NodeHeader

    app = SapoDashboard(Config(name="ada"), start=False)
    path = "in the class via the LAN (2 peers), the host's relay (3 members heard)"

    async def drive() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            header = app.query_one(NodeHeader)
            app.post_message(LogLine("ada: class: a log line's words"))  # words move nothing
            app.post_message(PathChanged(path))  # while its model loads (a typed event)
            await pilot.pause()
            assert path in str(header.render()) and "words" not in str(header.render())
            own = "2 peers connected (2 lan); relay up, 0 more heard through it in 5 min"
            app.post_message(node_started(transport=own))  # the node's own counts
            await pilot.pause()
            text = str(header.render())
            assert path in text and "heard through it in 5 min" not in text

    asyncio.run(drive())


def test_a_students_links_name_the_hosts_address_and_peers_see_its_backend(host, tmp_path) -> None:
    """Issue 48: 'connected via manual' in a student's log; peers showed its backend as '?'
    until its model had loaded (the first links carry what it said then)."""
    from sapo_edge.classroom.join import join_class
    from sapo_edge.swarm.identity import Identity

    said: list[str] = []
    local = dict(out_dir=str(tmp_path / "s"), name="ada", listen="127.0.0.1:0", mdns=False)
    j = join_class(host.code, local, identity=Identity.generate(), kind="torch", log=said.append)
    me = j.transport.ident.node_id
    try:
        j.transport.start()
        linked(j)
        assert any(s.endswith("connected via the host's address") for s in said), said
        assert host.transport.wait_for(
            lambda: any(
                p.node_id == me and p.backend == "torch/cpu" for p in host.transport.peers()
            ),
            10,
        ), host.transport.peers()
    finally:
        j.transport.close()


def test_the_exit_summary_prints_the_code_in_force_or_none_once_the_class_ended(
    host, tmp_path
) -> None:
    """Issue 48: a student's summary printed the code it joined with, which the teacher's n
    had replaced, and still printed it after the class ended. The host says its new code to
    the class (a member's forged one is not heeded); after the end there is none, and the
    command goes on alone."""
    from sapo_edge.swarm.progress import Progress

    ada, bob = student(host, tmp_path, "ada"), student(host, tmp_path, "bob")
    first = host.code
    try:
        for j in (ada, bob):
            j.transport.start()
            linked(j)
        assert ada.continue_command(headless=True, more=False).startswith(
            f"sapo-edge join {first} --headless --name ada"
        )
        bob.transport.stats.announce(Progress("code", code="9-acorn-zinnia@10.0.0.9:7745"))
        new = host.new_code()
        assert ada.transport.wait_for(lambda: ada.code_in_force == new, 10)
        assert "9-acorn" not in ada.continue_command(headless=False, more=False)
        assert ada.continue_command(headless=False, more=False).startswith(f"sapo-edge join {new} ")
        host.end(lambda _m: None)
        assert ada.class_ended.wait(10)
        said = ada.continue_command(headless=True, more=True)
        assert said.startswith("none: the class has ended (no join code admits anyone now)")
        out = Path(ada.cfg.out_dir).resolve()
        assert said.endswith(
            f"alone: sapo-edge run --solo --config {out / 'ada' / 'config.json'} --out-dir "
            f"{out} --resume --headless --rounds {2 * ada.cfg.rounds}"
        )
    finally:
        for j in (ada, bob):
            j.transport.close()


@pytest.mark.slow
def test_the_alone_command_of_an_ended_class_continues_the_students_run(
    host, tmp_path, tiny_qwen
) -> None:
    """Found in the class check: the summary's `run --solo ... --resume` after the class ended
    failed ('task sampler state was saved with seed X'): a solo run drew its node id from its
    name, the class's run from its identity. A resumed solo run takes the id it was saved with."""
    import dataclasses

    from sapo_edge.cli import main
    from sapo_edge.run.runner import run_single

    j = student(host, tmp_path, "ada")
    small = dict(questions_per_round=1, group_size=2, max_new_tokens=4, local_samples=1)
    cfg = dataclasses.replace(j.cfg, model=str(tiny_qwen), rounds=1, external_samples=0, **small)
    try:
        run_single(cfg, j.callback(test_classroom.Quiet()), lambda _m: None, None, j.session)
    finally:
        j.transport.close()
    j.cfg, j.class_ended = cfg, threading.Event()
    j.class_ended.set()
    command = j.continue_command(headless=True, more=True).split("alone: ", 1)[1].split()
    assert command[:3] == ["sapo-edge", "run", "--solo"]
    assert main(command[1:]) == 0
    rounds = [json.loads(ln)["round"] for ln in (Path(cfg.out_dir) / "ada" / "metrics.jsonl")
              .read_text().splitlines()]  # fmt: skip
    assert rounds == [0, 1]


# ------------------------------------------------------------------ real processes, a real LAN
sys.path.insert(0, str(ROOT / "bench"))


def lan_processes(tmp_path: Path, tiny_qwen) -> tuple[dict[str, str], list[str], list[str]]:
    """For a test of real processes on a LAN of namespaces (skipped where it cannot run: no
    root for namespaces, no tmux): their environment, the command that runs sapo-edge, and the
    flags of a quick run on the tiny model."""
    import chaos_lan

    if why := chaos_lan.can_netns():
        pytest.skip(why)
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    tmp_path.chmod(0o755)
    env = {
        "HF_HUB_OFFLINE": "1",
        "SAPO_EDGE_CPU_DTYPE": "float32",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "TERM": "xterm-256color",
    }
    cli = [sys.executable, "-m", "sapo_edge.cli"]
    return env, cli, ["--model", str(tiny_qwen), "--checkpoint-every", "0"]


class Tmux:
    """A tmux server of the test's own (its own socket, this process's environment)."""

    def __init__(self, tag: str) -> None:
        self.socket = f"sapo-test-{tag}"
        self.windows: list[str] = []

    def _run(self, *args: str) -> str:
        # COLUMNS/LINES (80x24 in CI's run) would pin the app to that size whatever the pane's:
        # Textual reads them before the terminal (as shutil.get_terminal_size does)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        r = subprocess.run(
            ["tmux", "-f", "/dev/null", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=env,
        )
        return r.stdout

    def open(self, name: str, command: list[str], env: dict[str, str]) -> None:
        line = " ".join(
            ["env", "-u", "COLUMNS", "-u", "LINES"]
            + [*(f"{k}={v}" for k, v in env.items()), *map(_quote, command)]
            + ["; sleep 600"]  # the pane stays readable after the program ends
        )
        first = not self.windows
        if first:
            self._run("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", "-n", name, line)
        else:
            self._run("new-window", "-t", "t", "-n", name, line)
        self.windows.append(name)

    def screen(self, name: str) -> str:
        return self._run("capture-pane", "-p", "-t", f"t:{name}")

    def keys(self, name: str, *keys: str) -> None:
        self._run("send-keys", "-t", f"t:{name}", *keys)

    def close(self) -> None:
        self._run("kill-server")


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _until(pred, timeout: float, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(step)
    return None


def _metrics(run: Path) -> list[dict]:
    """The rounds a run has recorded; a last line still being written is not one yet."""
    out = []
    for path in run.glob("*/metrics.jsonl"):
        for ln in path.read_text().splitlines():
            try:
                out.append(json.loads(ln))
            except json.JSONDecodeError:
                continue  # appended while read: the next read has it whole
    return out


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.timeout(600)
def test_a_host_stopped_with_q_tells_a_student_in_the_dashboard_within_seconds(
    tiny_qwen, tmp_path
) -> None:
    """Issue 48, with real processes: a host (its class view), a student in the dashboard and
    one headless, each its own SAPO_EDGE_HOME, on a LAN of network namespaces. The teacher
    presses q; the dashboard says so within seconds and still says so after rounds that keep
    receiving the other student's groups (the two students stay linked over the LAN)."""
    import chaos_lan

    env, cli, fast = lan_processes(tmp_path, tiny_qwen)
    # the students train until the test ends them: the preset's 100 rounds of the tiny model can
    # be over before the teacher's q, and the rounds after it are what the test reads
    students = [*fast, "--rounds", "100000"]
    term = Tmux(f"{os.getpid()}")
    headless = None
    with chaos_lan.Lan(3) as lan:
        try:
            host_ns, dash_ns, plain_ns = lan.nss
            term.open(
                "host",
                [
                    "ip",
                    "netns",
                    "exec",
                    host_ns,
                    *cli,
                    "host",
                    "--preset",
                    "addition",
                    *fast,
                    "--out-dir",
                    str(tmp_path / "class"),
                    "--web",
                    "127.0.0.1:0",
                ],
                {**env, "SAPO_EDGE_HOME": str(tmp_path / "host")},
            )
            found = _until(
                lambda: re.search(r"\b(\d+-[a-z]+-[a-z]+@[\d.]+:\d+)", term.screen("host")), 180
            )
            assert found, term.screen("host")
            code = found.group(1)
            term.open(
                "dash",
                [
                    "ip",
                    "netns",
                    "exec",
                    dash_ns,
                    *cli,
                    "join",
                    code,
                    *students,
                    "--out-dir",
                    str(tmp_path / "dash"),
                ],
                {**env, "SAPO_EDGE_HOME": str(tmp_path / "dash-home")},
            )
            headless = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    plain_ns,
                    *cli,
                    "join",
                    code,
                    "--headless",
                    *students,
                    "--out-dir",
                    str(tmp_path / "plain"),
                ],
                env={**os.environ, **env, "SAPO_EDGE_HOME": str(tmp_path / "plain-home")},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            lines: list[str] = []
            threading.Thread(
                target=lambda: lines.extend(iter(headless.stdout.readline, "")), daemon=True
            ).start()
            # both students train and link to each other over the LAN (and to the host)
            assert _until(lambda: "the LAN (2 peers)" in term.screen("dash"), 240), term.screen(
                "dash"
            )
            assert _until(lambda: len(_metrics(tmp_path / "dash")) >= 2, 120)
            term.keys("host", "q")
            ended = _until(lambda: CLASS_ENDED_TITLE in term.screen("dash"), 30)
            assert ended, term.screen("dash")
            assert _until(lambda: any(CLASS_ENDED_TITLE in ln for ln in lines), 30), lines[-20:]
            told_at, seen = time.time(), len(_metrics(tmp_path / "dash"))
            # rounds go on, receiving the headless classmate's groups: the banner stays
            later = _until(
                lambda: [
                    m
                    for m in _metrics(tmp_path / "dash")[seen:]
                    if m["time"] > told_at and m["received"] > 0
                ][1:],
                120,
            )
            assert later, _metrics(tmp_path / "dash")[-3:]
            screen = term.screen("dash")
            assert CLASS_ENDED_TITLE in screen and "q stops it now" in screen, screen
            # the header says it at the path watcher's next look (once a second): the tiny
            # model's rounds can outrun it, so wait for it, bounded
            header = "the class has ended (the teacher's q)"
            said = _until(lambda: header in term.screen("dash").splitlines()[0], 10)
            assert said, term.screen("dash")
        finally:
            if headless is not None and headless.poll() is None:
                headless.terminate()
                try:
                    headless.wait(30)
                except subprocess.TimeoutExpired:
                    headless.kill()
            for name in term.windows:
                term.keys(name, "q")
            time.sleep(2)
            term.close()
