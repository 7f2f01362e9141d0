"""`sapo-edge` without a subcommand is `run`: the dashboard in a terminal, one line per round
otherwise (a bare `sapo-edge` in a pipe prints the help, see test_cli.py); and how a run ends:
real `sapo-edge` processes on the tiny model, in a pseudo-terminal (dashboard) or a pipe
(headless), stopped by SIGTERM, a hangup, Ctrl-C or q. Every wait is bounded."""

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sapo_edge.tui.app as tui_app
from sapo_edge.cli import main

pty = pytest.importorskip("pty", reason="pseudo-terminals are POSIX only")
import fcntl  # noqa: E402
import struct  # noqa: E402
import termios  # noqa: E402

LEAVE_ALT_SCREEN, MOUSE_OFF = b"\x1b[?1049l", b"\x1b[?1000l"
BOUND = 90  # seconds: a stop takes seconds; this only keeps a broken build from hanging CI


def test_no_subcommand_in_a_terminal_opens_the_dashboard(monkeypatch):
    opened = []
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(tui_app, "run_dashboard", lambda cfg: opened.append(cfg) or 0)
    assert main(["--rounds", "3", "--name", "lab-1"]) == 0
    assert [(c.rounds, c.name) for c in opened] == [(3, "lab-1")]
    assert main(["run", "--rounds", "4"]) == 0 and opened[-1].rounds == 4
    assert main([]) == 0 and opened[-1].rounds == 100  # bare `sapo-edge`: defaults


def test_headless_or_not_a_terminal_never_opens_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tui_app, "run_dashboard", lambda cfg: (_ for _ in ()).throw(AssertionError))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    missing = str(tmp_path / "missing.gguf")
    assert main(["run", "--headless", "--model", missing]) == 2
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert main(["--model", missing]) == 2  # no subcommand, piped: headless `run`
    assert "does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------- real processes
def _flags(model, out: Path, *extra: str) -> list[str]:
    return [
        "--model", str(model), "--solo", "--out-dir", str(out), "--rounds", "50",
        "--domains", "basic_arithmetic", "--questions-per-round", "2", "--group-size", "2",
        "--local-samples", "1", "--external-samples", "0", "--lenient",
        "--max-new-tokens", "400", "--checkpoint-every", "0", *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", TERM="xterm-256color", HF_HUB_OFFLINE="1")
    for var in ("COLUMNS", "LINES", "TEXTUAL_DRIVER"):
        env.pop(var, None)
    return env


class Terminal:
    """A real `sapo-edge` in a 120x40 pseudo-terminal that it owns as its controlling tty."""

    def __init__(self, argv: list[str]):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sapo_edge.cli", *argv],
            stdin=slave, stdout=slave, stderr=slave, env=_env(), start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )  # fmt: skip
        os.close(slave)
        self.master, self.out, self.changed = master, bytearray(), threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the last holder of the terminal has exited
                chunk = b""
            with self.changed:
                self.out += chunk
                self.changed.notify_all()
            if not chunk:
                return

    def wait_for(self, predicate, timeout: float = BOUND) -> None:
        """Until predicate() holds, re-checked whenever the screen changes (at least once a
        second, the dashboard's clock tick)."""
        with self.changed:
            assert self.changed.wait_for(predicate, timeout), self.text()[-3000:]

    def text(self) -> str:
        return self.out.decode("utf-8", "replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        try:
            os.close(self.master)
        except OSError:
            pass


def _rounds_done(out: Path) -> int:
    metrics = out / "node" / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.exists() else 0


def _newest_checkpoint(out: Path) -> Path | None:
    done = sorted((out / "node" / "checkpoints").glob("round-*/COMPLETE"))
    return done[-1].parent if done else None


@pytest.mark.slow
def test_sigterm_stops_the_dashboard_saves_restores_the_terminal_and_says_how_to_resume(
    tiny_qwen, tmp_path
):
    term = Terminal(_flags(tiny_qwen, tmp_path))
    try:
        term.wait_for(lambda: _rounds_done(tmp_path) >= 1)
        signalled_at = len(term.out)
        term.proc.send_signal(signal.SIGTERM)
        assert term.proc.wait(BOUND) == 128 + signal.SIGTERM
        term.reader.join(BOUND)
    finally:
        term.close()
    after = bytes(term.out[signalled_at:])
    # the terminal is handed back: alternate screen left, mouse reporting off
    assert LEAVE_ALT_SCREEN in after and MOUSE_OFF in after
    summary = after[after.rindex(LEAVE_ALT_SCREEN) :].decode("utf-8", "replace")
    done = _rounds_done(tmp_path)
    newest = _newest_checkpoint(tmp_path)
    assert newest is not None and newest.name == f"round-{done:06d}"  # the last finished round
    assert f"sapo-edge stopped: {done} of 50 rounds done" in summary
    assert str(newest) in summary and "--resume" in summary
    assert "Traceback" not in term.text()


@pytest.mark.slow
def test_closing_the_terminal_stops_and_saves(tiny_qwen, tmp_path):
    term = Terminal(_flags(tiny_qwen, tmp_path))
    try:
        term.wait_for(lambda: _rounds_done(tmp_path) >= 1)
        os.close(term.master)  # the terminal window is closed: the kernel sends SIGHUP
        assert term.proc.wait(BOUND) == 128 + signal.SIGHUP
    finally:
        term.close()
    newest = _newest_checkpoint(tmp_path)
    assert newest is not None and newest.name == f"round-{_rounds_done(tmp_path):06d}"


@pytest.mark.slow
def test_a_failed_start_prints_the_error_and_its_fix_after_the_dashboard(tmp_path):
    term = Terminal(
        ["--model", str(tmp_path / "no-such-model"), "--solo", "--out-dir", str(tmp_path)]
    )
    try:
        term.wait_for(lambda: b"Model not found" in term.out)
        os.write(term.master, b"q")
        assert term.proc.wait(BOUND) == 1
        term.reader.join(BOUND)
    finally:
        term.close()
    after = term.text()[term.text().rindex(LEAVE_ALT_SCREEN.decode()) :]
    assert "sapo-edge: error: Model not found" in after
    assert "Hugging Face" in after and "Traceback" not in after


def _headless(model, out: Path, cwd: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "sapo_edge.cli", "run", "--headless", *_flags(model, out)]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=cwd, text=True
    )


@pytest.mark.slow
def test_headless_ctrl_c_saves_and_prints_a_summary_whose_command_continues_the_run(
    tiny_qwen, tmp_path, monkeypatch, capsys
):
    sig = signal.SIGINT  # SIGTERM and SIGHUP reach the same handler (test_control.py)
    out_dir = tmp_path / "runs"
    proc = _headless(tiny_qwen, out_dir, tmp_path)
    try:
        for line in proc.stdout:  # one line per round: wait for the first
            if " round    1 |" in line:
                break
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=BOUND)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig
    assert "stopping within seconds" in err and "Traceback" not in out + err
    done = _rounds_done(out_dir)
    newest = _newest_checkpoint(out_dir)
    assert done >= 1 and newest is not None and newest.name == f"round-{done:06d}"
    assert f"sapo-edge stopped: {done} of 50 rounds done ({done} in this session)" in out
    assert str(newest) in out
    # the printed command continues the run, from any folder
    (command,) = [ln.split("continue", 1)[1] for ln in out.splitlines() if "continue " in ln]
    argv = shlex.split(command)
    assert Path(argv[0]).name == "sapo-edge" and "--resume" in argv and "--headless" in argv
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main([*argv[1:], "--rounds", str(done + 1)]) == 0  # one more round, then done
    printed = capsys.readouterr().out
    assert f"resumed from round-{done:06d}" in printed
    rounds = [json.loads(ln)["round"] for ln in (out_dir / "node" / "metrics.jsonl").open()]
    assert rounds == list(range(done + 1))
    assert "train more" in printed and f"--rounds {2 * (done + 1)}" in printed
