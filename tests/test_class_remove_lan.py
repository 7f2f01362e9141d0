"""Issue 57 with real processes on a LAN of network namespaces: a host in its class view (tmux), a
student in the dashboard (tmux) and two headless ones, each its own process, home and namespace.
The teacher presses x and types a name: within 10 s the removed laptop's screen says so (headless,
then the dashboard), the others drop their links to it and refuse it from then on, and the view
no longer lists it."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time

import pytest
from test_class_student import Tmux, _until, lan_processes

from sapo_edge.classroom.join_status import REMOVED_TITLE

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.timeout(900)]


def _connected(lines: list[str], name: str) -> list[bool]:
    """The order of 'peer NAME (...) connected' / 'disconnected' lines: True for each connect."""
    out = []
    for ln in lines:
        if m := re.search(rf"peer {name} \(\w+\) (connected|disconnected)", ln):
            out.append(m.group(1) == "connected")
    return out


def teacher_box(term: Tmux, key: str, title: str, line: str) -> None:
    """The teacher's keys in the class view: `key`, `line` typed over the name filled in,
    Enter (once the box titled `title` shows what was typed)."""
    term.keys("host", key)
    assert _until(lambda: title in term.screen("host"), 20), term.screen("host")
    box = lambda: term.screen("host").split(title, 1)[-1][:1500]  # noqa: E731
    for _ in range(3):  # on this loaded machine a key typed into the box was once not seen
        time.sleep(1.0)
        term.keys("host", "C-u")
        time.sleep(0.5)
        term.keys("host", "-l", line)
        if _until(lambda: f"  {line} " in box(), 10):
            break
    else:
        raise AssertionError(term.screen("host"))
    term.keys("host", "Enter")


def _remove(term: Tmux, name: str) -> None:
    """x, the name, Enter."""
    teacher_box(term, "x", "remove a member", name)


def _row(screen: str, name: str) -> str:
    """The members table's line of `name` on the class view ("" when none)."""
    members = screen.split("members:", 1)[-1].split("reward per round", 1)[0]
    return next((ln for ln in members.splitlines() if f" {name} " in f" {ln} "), "")


def _rounds(lines: list[str]) -> list[int]:
    """The groups received in each round a headless run printed ('round 3 | ... | recv 8 |')."""
    return [
        int(m.group(1)) for ln in lines if (m := re.search(r"round +\d+ \|.*\| recv (\d+) \|", ln))
    ]


def test_the_teacher_removes_a_headless_and_a_dashboard_student_on_a_lan(tiny_qwen, tmp_path):
    import chaos_lan

    env, cli, fast = lan_processes(tmp_path, tiny_qwen)
    students = [*fast, "--rounds", "100000"]
    term = Tmux(f"rm{os.getpid()}")
    plain: dict[str, subprocess.Popen] = {}
    lines: dict[str, list[str]] = {"bob": [], "cy": []}
    with chaos_lan.Lan(4) as lan:
        host_ns, ada_ns, bob_ns, cy_ns = lan.nss
        try:
            term.open(
                "host",
                ["ip", "netns", "exec", host_ns, *cli, "host", "--preset", "addition", *fast]
                + ["--out-dir", str(tmp_path / "class"), "--web", "127.0.0.1:0"],
                {**env, "SAPO_EDGE_HOME": str(tmp_path / "host")},
            )
            found = _until(
                lambda: re.search(r"\b(\d+-[a-z]+-[a-z]+@[\d.]+:\d+)", term.screen("host")), 180
            )
            assert found, term.screen("host")
            code = found.group(1)
            term.open(
                "ada",
                ["ip", "netns", "exec", ada_ns, *cli, "join", code, *students, "--name", "ada"]
                + ["--out-dir", str(tmp_path / "ada")],
                {**env, "SAPO_EDGE_HOME": str(tmp_path / "ada-home")},
            )
            for name, ns in (("bob", bob_ns), ("cy", cy_ns)):
                plain[name] = subprocess.Popen(
                    ["ip", "netns", "exec", ns, *cli, "join", code, "--headless", *students]
                    + ["--name", name, "--out-dir", str(tmp_path / name)],
                    env={**os.environ, **env, "SAPO_EDGE_HOME": str(tmp_path / f"{name}-home")},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                out = lines[name]
                threading.Thread(
                    target=lambda p=plain[name], out=out: out.extend(iter(p.stdout.readline, "")),
                    daemon=True,
                ).start()
            # everyone is in and linked over the LAN: bob has links to ada and to cy
            assert _until(
                lambda: (
                    _connected(lines["bob"], "cy")[-1:] == [True]
                    and _connected(lines["bob"], "ada")[-1:] == [True]
                ),
                300,
            ), lines["bob"][-30:]
            assert _until(lambda: "round" in term.screen("ada"), 120), term.screen("ada")
            for name in ("bob", "cy"):  # mid-class: each has done rounds with the others
                assert _until(lambda n=name: _rounds(lines[n]), 240), lines[name][-20:]

            # the teacher: x, the name, Enter
            _remove(term, "cy")
            t0 = time.time()
            told = _until(lambda: any(REMOVED_TITLE in ln for ln in lines["cy"]), 10)
            assert told, (time.time() - t0, lines["cy"][-20:], term.screen("host"))
            said = next(ln for ln in lines["cy"] if REMOVED_TITLE in ln)
            assert "sapo-edge run --solo --config" in said and "--resume" in said, said
            # bob drops its link to cy within 10 s and does not take it back
            assert _until(lambda: _connected(lines["bob"], "cy")[-1:] == [False], 10), lines["bob"][
                -20:
            ]
            assert _until(lambda: "removed cy from the class" in term.screen("host"), 10)

            # then the dashboard student
            _remove(term, "ada")
            assert _until(lambda: REMOVED_TITLE in term.screen("ada"), 10), term.screen("ada")
            assert _until(lambda: _connected(lines["bob"], "ada")[-1:] == [False], 10)
            time.sleep(15)  # the removed ones keep running (and redialing): still refused
            assert _connected(lines["bob"], "cy")[-1:] == [False], lines["bob"][-20:]
            assert _connected(lines["bob"], "ada")[-1:] == [False], lines["bob"][-20:]
            # cy trains alone now: its newest rounds received nothing of the class's
            cut = next(i for i, ln in enumerate(lines["cy"]) if REMOVED_TITLE in ln)
            after = _rounds(lines["cy"][cut:])
            assert len(after) >= 3 and all(r == 0 for r in after[1:]), lines["cy"][cut:]
            # bob, still in, took the room's new key from the host each time, and the host still
            # opens what bob says under it: bob's row on the teacher's view keeps moving
            rekeyed = [i for i, ln in enumerate(lines["bob"]) if "replaced the room's key" in ln]
            assert len(rekeyed) == 2, lines["bob"][-30:]
            row = _row(term.screen("host"), "bob")
            assert _until(lambda: _row(term.screen("host"), "bob") not in ("", row), 30), row
            screen = term.screen("host")
            members = screen.split("members:", 1)[-1].split("reward per round", 1)[0]
            assert "bob" in members and " cy " not in members and "ada" not in members, screen
            assert "removed from the class by the teacher" in term.screen("ada")
        finally:
            for p in plain.values():
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(30)
                    except subprocess.TimeoutExpired:
                        p.kill()
            for name in term.windows:
                term.keys(name, "q")
            time.sleep(2)
            term.close()
