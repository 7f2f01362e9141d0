"""Issue 44, the LAN test at 8 of 10: a node reported `reasoning-gym failed to build ...` and
exited 1, or hung at exit until killed, around a stop. The cause: each build swapped sys.stdout
for a muting wrapper and back, and a line another thread printed meanwhile (the network
thread's "peer ... disconnected", as links close around a stop) wrote into that wrapper after
the swap back had freed it (CPython 3.11's print() holds sys.stdout by a borrowed reference):
an AttributeError, a segfault or a corrupted heap. Run here in a child process, so a crash
fails the test instead of the test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sapo_edge.data import tasks
from sapo_edge.data.tasks import TaskError, TaskRef, regenerate

ROOT = Path(__file__).resolve().parent.parent

# The network thread prints while a question is built, and its first write is still under way
# when the build ends; print() then writes the line's end to what sys.stdout was.
_PRINT_ACROSS_A_BUILD = """
import sys, threading
from sapo_edge.data import tasks

class Terminal:  # the real stdout: its first write waits until the build is over
    def __init__(self):
        self.text, self.entered, self.go = [], threading.Event(), threading.Event()
    def write(self, s):
        if not self.entered.is_set():
            self.entered.set()
            assert self.go.wait(30)
        self.text.append(s)
        return len(s)
    def flush(self):
        pass

out = sys.stdout = Terminal()
real = tasks._dataset("basic_arithmetic", "{}", 7)
link = threading.Thread(target=lambda: print("peer n2 (e74fb902) disconnected"))

class Building:
    def __getitem__(self, i):
        print("noise from the generator")
        if i == 0:
            link.start()
            assert out.entered.wait(30)  # the link's line is being written now
        return real[i]

tasks._dataset = lambda *a: Building()
for i in range(3):  # the build ends, and more are built, while that line is written
    tasks.regenerate(tasks.TaskRef.make("basic_arithmetic", {}, seed=7, index=i))
out.go.set()
link.join(30)
sys.__stdout__.write(repr("".join(out.text)) + "\\n")
"""


def test_a_line_printed_across_the_end_of_a_build_is_written_whole() -> None:
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PRINT_ACROSS_A_BUILD)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "Exception" not in r.stderr, r.stderr[-2000:]
    assert r.stdout == repr("peer n2 (e74fb902) disconnected\n") + "\n"  # no generator noise


def test_a_stop_raised_while_a_question_is_built_is_a_stop_not_a_dataset_failure(
    monkeypatch,
) -> None:
    """A second Ctrl-C/SIGTERM raises KeyboardInterrupt wherever the main thread is, a build
    included: it leaves as itself (never a TaskError the run would report as a broken
    dataset), and this thread's prints are not muted afterwards."""
    real = tasks._dataset("basic_arithmetic", "{}", 7)

    class Stopped:
        def __getitem__(self, i):
            raise KeyboardInterrupt

    monkeypatch.setattr(tasks, "_dataset", lambda *a: Stopped())
    ref = TaskRef.make("basic_arithmetic", {}, seed=7, index=0)
    with pytest.raises(KeyboardInterrupt):
        regenerate(ref)
    assert not getattr(tasks._BUILDING, "on", False)
    monkeypatch.setattr(tasks, "_dataset", lambda *a: real)
    assert regenerate(ref).question  # the next build works

    class Broken:
        def __getitem__(self, i):
            raise ZeroDivisionError("a generator's own bug")

    def broken(*_a):
        return Broken()

    broken.cache_clear = lambda: None  # type: ignore[attr-defined]
    monkeypatch.setattr(tasks, "_dataset", broken)
    with pytest.raises(TaskError, match="reasoning-gym failed to build"):
        regenerate(ref)
