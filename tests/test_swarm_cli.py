"""`sapo-edge run` joins the swarm: network settings as flags and config, the identity's name,
a status line about peers, and a room secret that never reaches the saved config."""

from __future__ import annotations

import json

import pytest
from test_sim import FAST

from sapo_edge.cli import build_parser, config_from_args, main
from sapo_edge.config.settings import Config, ConfigError
from sapo_edge.swarm.identity import load_or_create
from sapo_edge.swarm.roomkey import new_room_key


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
    from sapo_edge.run.runner import run_single

    seen: list[str] = []

    class Recorder:
        def on_round(self, report) -> None:
            seen.append("round")

        def on_message(self, node: str, text: str) -> None:
            pass

        def on_phase(self, node, phase: str) -> None:
            seen.append(phase)

        def on_notice(self, node: str, text: str) -> None:
            notices.append(text)

    notices: list[str] = []
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
    # an open room is said to the person at the screen now (the dashboard's toast), not only
    # logged; the end-of-run save too
    assert notices[0].startswith("room 'default' is open: anyone who knows its name can join")
    assert notices[-1].startswith("checkpoint saved: ")


# --- secrets (issue 12: finding 11 and the low ones) -------------------------------------------

SECRET = "correct-horse-battery-staple-42"


def test_the_secret_never_lands_in_any_file_a_run_writes(tmp_path) -> None:
    """A networked node with a secret runs rounds and saves checkpoints: no file under its
    output folder holds the secret (state.json once carried the whole config)."""
    from scripted import Quiet, ScriptedBackend, make_cfg
    from swarm_util import net

    from sapo_edge.rl.trainer import Node

    cfg = make_cfg(tmp_path, secret=SECRET, room="lab")
    logs: list[str] = []
    t = net(room=cfg.room, secret=cfg.secret, log=logs.append)
    try:
        node = Node(
            cfg,
            ScriptedBackend(),
            t,
            node_id=t.ident.node_id,
            name="n",
            model_id="scripted",
            out_dir=tmp_path / "n",
            callback=Quiet(),
        )
        node.run_round()
        node.save()
    finally:
        t.close()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "state.json" for p in files) and any(
        p.name == "config.json" for p in files
    )
    for p in files:
        assert SECRET.encode() not in p.read_bytes(), p
    assert not any(SECRET in m for m in logs)


def test_the_secret_comes_from_env_file_or_prompt_and_the_flag_warns(tmp_path, monkeypatch, capsys):
    from sapo_edge.cli import _resolve_secret
    from sapo_edge.swarm.roomkey import RoomKeyError, read_secret

    monkeypatch.setenv("SAPO_EDGE_SECRET", SECRET)
    assert read_secret() == SECRET
    f = tmp_path / "room.key"
    f.write_text(new_room_key() + "\n")
    assert read_secret("", str(f)) == f.read_text().strip()  # a file beats the environment
    assert read_secret("", "-", prompt=lambda _q: " typed ") == "typed"
    with pytest.raises(RoomKeyError, match="cannot read the secret file"):
        read_secret("", str(tmp_path / "missing"))
    # on the command line: works, with a warning that it shows in `ps`
    cfg = _resolve_secret(parse("run", "--secret", SECRET), ["run", "--secret", SECRET])
    assert cfg.secret == SECRET and "visible to other users" in capsys.readouterr().err
    _resolve_secret(parse("run", "--secret-file", str(f)), ["run", "--secret-file", str(f)])
    assert capsys.readouterr().err == ""  # a room key from a file: nothing to warn about
    _resolve_secret(parse("run"), ["run"])  # from the environment (set above): no warning
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("SAPO_EDGE_SECRET", "short")
    _resolve_secret(parse("run"), ["run"])
    assert "can be guessed offline" in capsys.readouterr().err
    bad = new_room_key()[:-1] + ("0" if new_room_key()[-1] != "0" else "1")
    monkeypatch.setenv("SAPO_EDGE_SECRET", bad)
    with pytest.raises(RoomKeyError, match="typo"):
        _resolve_secret(parse("run"), ["run"])


def test_room_new_prints_a_fresh_key(capsys) -> None:
    from sapo_edge.swarm.roomkey import code_to_key

    assert main(["room", "new"]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["room", "new"]) == 0
    second = capsys.readouterr().out.strip()
    assert first != second and len(code_to_key(first)) == 16  # 128 random bits


def test_an_identity_file_owned_by_someone_else_is_refused(tmp_path, monkeypatch) -> None:
    import os

    from sapo_edge.swarm.identity import IdentityError

    path = tmp_path / "identity.key"
    load_or_create(path)
    if not hasattr(os, "getuid"):
        pytest.skip("no user ids on this platform")
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    with pytest.raises(IdentityError, match="belongs to user id"):
        load_or_create(path)


@pytest.mark.slow
def test_a_run_takes_its_room_key_from_SAPO_EDGE_SECRET_end_to_end(
    tiny_qwen, tmp_path, monkeypatch, capsys
) -> None:
    """The README's `export SAPO_EDGE_SECRET=sapo1-...; sapo-edge run ...`: the node that read
    the key from the environment completes the handshake with a peer holding the same room key
    (the link's pre-shared key derives from it), and is refused by one holding another key."""
    import time

    from swarm_util import net

    key = new_room_key()
    argv = ["run", "--headless", "--model", str(tiny_qwen), "--rounds", "1", "--no-mdns"]
    argv += ["--listen", "127.0.0.1:0", "--room", "lab", *FAST]
    me, _ = load_or_create()
    for peer_key, joins in ((key, True), (new_room_key(), False)):
        peer = net(room="lab", secret=peer_key)
        try:
            monkeypatch.setenv("SAPO_EDGE_SECRET", key)
            out = tmp_path / ("same" if joins else "other")
            assert main([*argv, "--out-dir", str(out), "--peer", f"127.0.0.1:{peer.port}"]) == 0
            capsys.readouterr()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                known = {p.node_id for p in peer.peers()}
                if (me.node_id in known) or (not joins and sum(peer.rejections().values())):
                    break
                time.sleep(0.05)
            assert (me.node_id in {p.node_id for p in peer.peers()}) is joins
            if not joins:
                assert sum(peer.rejections().values()) >= 1  # refused, and counted
            saved = (out / me.name / "config.json").read_text()
            assert key not in saved
        finally:
            peer.close()
