"""Windows and the relay container: sapo-edge's own code imports nothing POSIX-only, the Windows
branches of the peak-memory and process checks avoid `resource` and `os.kill`, and the relay
starts with the ML stack missing (as in packaging/Dockerfile)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sapo_edge.backends import base
from sapo_edge.rl import checkpoints

HERE = Path(__file__).resolve().parent
POSIX_ONLY = "resource,fcntl,termios,pwd,grp,tty,pty"
IMPORT_ALL = """
import importlib, pkgutil, sys
pkg = importlib.import_module(PKG)
bad = []
for m in pkgutil.walk_packages(pkg.__path__, PKG + "."):
    try:
        importlib.import_module(m.name)
    except Exception as e:
        bad.append(f"{m.name}: {type(e).__name__}: {e}")
print("\\n".join(bad) or "all imported")
"""


def import_all(package: str, cwd: Path, timeout: int = 300) -> str:
    code = f"PKG = {package!r}\n" + IMPORT_ALL
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "blocked_imports.py"),
            "--from",
            package,
            POSIX_ONLY,
            "--",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.mark.slow
def test_every_module_imports_without_posix_only_modules() -> None:
    assert import_all("sapo_edge", HERE.parent) == "all imported"


def test_the_guard_catches_a_posix_only_import(tmp_path: Path) -> None:
    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fine.py").write_text("import os\n")
    (pkg / "posix.py").write_text("import fcntl\n")
    out = import_all("probe_pkg", tmp_path)
    assert "probe_pkg.posix: ModuleNotFoundError" in out and "probe_pkg.fine" not in out


def test_peak_rss_on_windows_uses_no_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    class Info:
        peak_wset = 300 * 2**20

    class Proc:
        def memory_info(self) -> Info:
            return Info()

    monkeypatch.setattr(base.sys, "platform", "win32")
    monkeypatch.setattr(psutil, "Process", Proc)
    monkeypatch.setitem(sys.modules, "resource", None)  # an import of it would raise
    assert base.peak_rss_mb() == 300.0


def test_pid_check_on_windows_never_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)

    def no_kill(*_a: object) -> None:
        raise AssertionError("os.kill(pid, 0) terminates the process on Windows")

    import psutil  # imported now: importing it while os.name lies would fail

    asked: list[int] = []

    def pid_exists(pid: int) -> bool:  # psutil's own pid_exists uses os.kill on Linux
        asked.append(pid)
        return pid == os.getppid()

    monkeypatch.setattr(psutil, "pid_exists", pid_exists)
    monkeypatch.setattr(checkpoints.os, "kill", no_kill)
    real_name = os.name
    try:  # os.name set only around the two calls: pytest itself must not see "nt"
        os.name = "nt"
        alive, gone = checkpoints._pid_alive(os.getppid()), checkpoints._pid_alive(dead.pid)
    finally:
        os.name = real_name
    assert alive is True and gone is False and asked == [os.getppid(), dead.pid]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_relay_runs_without_the_ml_stack() -> None:
    """What packaging/Dockerfile installs: sapo-edge without torch, transformers, numpy ..."""
    port = _free_port()
    hidden = "torch,transformers,peft,numpy,safetensors,gguf,reasoning_gym,textual,mlx,zeroconf"
    code = (
        "import sys; sys.argv = ['sapo-edge', 'relay', '--host', '127.0.0.1', '--port', "
        f"'{port}']\nfrom sapo_edge.cli import main\nsys.exit(main())"
    )
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "blocked_imports.py"), hidden, "--", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE.parent,
    )
    try:
        body, deadline = None, time.monotonic() + 60
        while body is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=2) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.2)  # polling for the port to open, bounded by the deadline
        assert body is not None, proc.stderr.read() if proc.poll() is not None else "no answer"
        assert isinstance(body, dict) and body["nodes"] == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
