"""Issue 54 #4 with real processes on a LAN of network namespaces: a host in its class view (tmux,
`--hint host`) and a headless student, each its own process, home and namespace. The teacher
presses h on the view and types the student's name: the student's output says the teacher gave
it the worked example, its next checkpoints were trained with it (their saved config), and the
view marks its row (hint); `unhint NAME` in the same box takes it back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_class_remove_lan import _rounds, teacher_box
from test_class_student import Tmux, _until, lan_processes

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.timeout(900)]

GIVEN = "the teacher gave this laptop the worked example"
TAKEN = "the teacher took the worked example back"


def _say(term: Tmux, line: str) -> None:
    """h, the line (a name, or `unhint NAME`), Enter."""
    teacher_box(term, "h", "the worked example", line)


def _saved_example(out: Path) -> list[bool]:
    """format_example in each of the student's checkpoints, oldest first."""
    states = sorted(out.rglob("state.json"), key=lambda p: p.stat().st_mtime)
    got = []
    for p in states:
        try:
            got.append(json.loads(p.read_text())["config"]["format_example"])
        except (OSError, ValueError, KeyError):
            continue  # being written
    return got


def test_the_teacher_gives_a_headless_student_the_example_and_takes_it_back_on_a_lan(
    tiny_qwen, tmp_path
):
    import chaos_lan

    env, cli, fast = lan_processes(tmp_path, tiny_qwen)
    term = Tmux(f"hint{os.getpid()}")
    lines: list[str] = []
    bob = None
    with chaos_lan.Lan(2) as lan:
        host_ns, bob_ns = lan.nss
        try:
            term.open(
                "host",
                ["ip", "netns", "exec", host_ns, *cli, "host", "--preset", "addition", *fast]
                + ["--hint", "host", "--out-dir", str(tmp_path / "class"), "--web", "127.0.0.1:0"],
                {**env, "SAPO_EDGE_HOME": str(tmp_path / "host")},
            )
            found = _until(
                lambda: re.search(r"\b(\d+-[a-z]+-[a-z]+@[\d.]+:\d+)", term.screen("host")), 180
            )
            assert found, term.screen("host")
            out = tmp_path / "bob"
            bob = subprocess.Popen(
                ["ip", "netns", "exec", bob_ns, *cli, "join", found.group(1), "--headless"]
                + ["--model", str(tiny_qwen), "--checkpoint-every", "1", "--rounds", "100000"]
                + ["--name", "bob", "--out-dir", str(out)],
                env={**os.environ, **env, "SAPO_EDGE_HOME": str(tmp_path / "bob-home")},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            threading.Thread(
                target=lambda: lines.extend(iter(bob.stdout.readline, "")), daemon=True
            ).start()
            assert _until(lambda: _rounds(lines), 300), lines[-20:]
            assert _until(lambda: _saved_example(out)[-1:] == [False], 60), lines[-20:]

            _say(term, "bob")
            assert _until(lambda: any(GIVEN in ln for ln in lines), 30), lines[-20:]
            assert _until(lambda: "bob sees the worked example" in term.screen("host"), 10)
            members = lambda: term.screen("host").split("members:", 1)[-1]  # noqa: E731
            assert _until(lambda: "bob (hint)" in members(), 20), term.screen("host")
            # its next rounds trained with the example: their checkpoints say so
            assert _until(lambda: _saved_example(out)[-2:] == [True, True], 120), lines[-20:]

            _say(term, "unhint bob")
            assert _until(lambda: any(TAKEN in ln for ln in lines), 30), lines[-20:]
            assert _until(lambda: _saved_example(out)[-2:] == [False, False], 120), lines[-20:]
            assert _until(lambda: "bob (hint)" not in members(), 20), term.screen("host")
        finally:
            if bob is not None and bob.poll() is None:
                bob.terminate()
                try:
                    bob.wait(30)
                except subprocess.TimeoutExpired:
                    bob.kill()
            term.keys("host", "q")
            time.sleep(2)
            term.close()
