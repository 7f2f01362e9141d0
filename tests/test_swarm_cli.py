"""`sapo-edge run` joins the swarm: network settings as flags and config, the identity's name,
a status line about peers, and a room secret that never reaches the saved config."""

from __future__ import annotations

import json

import pytest
from test_sim import FAST

from sapo_edge.cli import build_parser, config_from_args, main
from sapo_edge.config import Config, ConfigError
from sapo_edge.swarm.identity import load_or_create


def parse(*argv: str) -> Config:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_network_flags_and_their_checks() -> None:
    cfg = parse("run", "--peer", "10.0.0.2:7744", "--peer", "h:1,k:2", "--no-mdns", "--room", "lab")
    assert cfg.peer == ["10.0.0.2:7744", "h:1", "k:2"] and cfg.mdns is False and cfg.room == "lab"
    assert parse("run").peer == [] and parse("run").listen == "0.0.0.0:7744"
    for bad, msg in [
        (dict(peer=["h:0"]), "HOST:PORT"),
        (dict(peer=["h:port"]), "HOST:PORT"),
        (dict(listen="h:99999"), "HOST:PORT"),
        (dict(relay="http://x:1"), "ws://HOST:PORT"),
        (dict(room=""), "1 to 64 characters"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            Config(**bad)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sim", "--room", "lab"])  # the network is run only


def test_the_secret_is_never_saved(tmp_path) -> None:
    Config(secret="hunter2", room="lab").save(tmp_path / "config.json")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "secret" not in saved and saved["room"] == "lab"
    assert Config.from_dict(saved).secret == ""


def test_run_joins_the_swarm_under_its_identity(tiny_qwen, tmp_path, capsys) -> None:
    out = tmp_path / "runs"
    argv = ["run", "--headless", "--model", str(tiny_qwen), "--out-dir", str(out), "--rounds", "1"]
    net = ["--no-mdns", "--listen", "127.0.0.1:0", "--room", "lab", "--secret", "hunter2"]
    assert main([*argv, *net, *FAST]) == 0
    printed = capsys.readouterr().out
    ident, created = load_or_create()  # the one the run made in SAPO_EDGE_HOME (see conftest)
    assert not created and f"new identity {ident.node_id}" in printed
    assert f"{ident.name}: 0 peers connected; listening on :" in printed
    saved = (out / ident.name / "config.json").read_text()
    assert "hunter2" not in saved and '"room": "lab"' in saved
    assert main([*argv, "--solo", *FAST]) == 0  # --solo: no network at all
    assert "solo (no peers)" in capsys.readouterr().out


def test_a_networked_node_reports_every_phase_to_its_callback(tiny_qwen, tmp_path) -> None:
    """The dashboard learns the node and its phases through on_phase: the network's status
    wrapper must pass it on (it once swallowed it, leaving the header and feed empty)."""
    from sapo_edge.runner import run_single

    seen: list[str] = []

    class Recorder:
        def on_round(self, report) -> None:
            seen.append("round")

        def on_message(self, node: str, text: str) -> None:
            pass

        def on_phase(self, node, phase: str) -> None:
            seen.append(phase)

    cfg = Config(
        model=str(tiny_qwen),
        rounds=1,
        out_dir=str(tmp_path),
        mdns=False,
        listen="127.0.0.1:0",
        domains={"basic_arithmetic": 1.0},
        questions_per_round=1,
        group_size=2,
        max_new_tokens=4,
        local_samples=1,
        external_samples=0,
    )
    run_single(cfg, callback=Recorder(), log=lambda _m: None)
    assert seen[:5] == ["sampling", "generating", "scoring", "sharing", "training"]
    assert "round" in seen
