"""CLI conventions: --version, help that says what bare `sapo-edge` does, flag and command typo
suggestions, defaults in `run --help`, host/port defaults, presets, shell completion, and errors
that are one sentence with the fix (busy relay port, no network, too little memory)."""

from __future__ import annotations

import errno
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from sapo_edge import __version__
from sapo_edge.cli import build_parser, config_from_args, main
from sapo_edge.config.settings import Config, ConfigError, load_preset, preset_names
from sapo_edge.machine import fit
from sapo_edge.models import resolve as models

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SAPO_EDGE_HOME", str(tmp_path / "home"))


def exits(capsys: pytest.CaptureFixture[str], argv: list[str], code: int) -> tuple[str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == code
    return capsys.readouterr()


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.startswith("sapo-edge:")]
    assert len(lines) == 1 and "Traceback" not in out + err, err
    return lines[0]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = exits(capsys, ["--version"], 0)
    assert out.strip() == f"sapo-edge {__version__}"


def test_top_level_help_says_what_bare_sapo_edge_does(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = exits(capsys, ["--help"], 0)
    assert "Bare `sapo-edge`" in out and "opens the dashboard" in out
    for command in ("run", "sim", "models", "runs", "presets", "doctor", "relay", "completion"):
        assert f"\n    {command}" in out


def test_a_mistyped_flag_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    _, err = exits(capsys, ["run", "--grop-size", "4"], 2)
    assert "did you mean: --grop-size -> --group-size?" in err and "usage: sapo-edge run" in err
    _, err = exits(capsys, ["sim", "--presetz=demo"], 2)
    assert "--presetz -> --preset" in err


def test_a_mistyped_command_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    _, err = exits(capsys, ["doctr"], 2)
    assert "did you mean 'doctor'?" in err


def test_run_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = exits(capsys, ["run", "--help"], 0)
    flat = " ".join(out.split())
    assert "(default: 8)" in flat and "(default: 0.0.0.0:7744)" in flat
    assert "(default: Qwen/Qwen2.5-0.5B-Instruct)" in flat and "(default: off)" in flat


@pytest.mark.parametrize(
    ("argv", "field", "want"),
    [
        (["--listen", "7744"], "listen", "0.0.0.0:7744"),
        (["--listen", "127.0.0.1"], "listen", "127.0.0.1:7744"),
        (["--peer", "10.0.0.5"], "peer", ["10.0.0.5:7744"]),
        (["--peer", "10.0.0.5,h:9"], "peer", ["10.0.0.5:7744", "h:9"]),
        (["--peer", "fe80::1"], "peer", ["[fe80::1]:7744"]),
        (["--relay", "localhost:7745"], "relay", "ws://localhost:7745"),
        (["--relay", "relay.lan"], "relay", "ws://relay.lan:7745"),
        (["--relay", "wss://relay.example/ws"], "relay", "wss://relay.example/ws"),
    ],
)
def test_host_and_port_defaults(argv: list[str], field: str, want: object) -> None:
    cfg = config_from_args(build_parser().parse_args(["run", *argv]))
    assert getattr(cfg, field) == want


def test_presets_load_validate_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(preset_names()) >= {"demo", "paper", "addition", "arithmetic"}
    for name in preset_names():
        from sapo_edge.data.task_sampler import TaskSampler

        cfg = Config.load("", {"preset": name})
        TaskSampler(cfg.domains, cfg.domain_configs, 0)  # its tasks build
    assert main(["presets"]) == 0
    assert "demo" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="preset 'dmeo' is unknown: use one of"):
        Config.load("", {"preset": "dmeo"})


def test_the_demo_preset_is_the_addition_level_on_smollm2_and_the_example_agrees() -> None:
    demo, addition = load_preset("demo"), load_preset("addition")
    for key, value in addition.items():
        assert demo[key] == value, key
    assert demo["model"] == "smollm2-135m"
    assert Config.load(EXAMPLES / "demo.toml") == Config.load("", {"preset": "demo"})
    paper = Config.load("", {"preset": "paper"})
    assert dataclass_equal_but_preset(paper, Config())


def dataclass_equal_but_preset(a: Config, b: Config) -> bool:
    da, db = a.to_dict(), b.to_dict()
    da.pop("preset"), db.pop("preset")
    return da == db


def test_flags_beat_the_file_which_beats_the_preset(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('preset = "demo"\ngroup_size = 6\nrounds = 9\n')
    cfg = config_from_args(
        build_parser().parse_args(["sim", "--config", str(path), "--rounds", "2"])
    )
    assert cfg.rounds == 2 and cfg.group_size == 6 and cfg.model == "smollm2-135m"


def test_the_config_folder_config_toml_is_read_when_no_config_is_given(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.toml").write_text('relay = "relay.lan"\n')
    cfg = config_from_args(build_parser().parse_args(["run"]))
    assert cfg.relay == "ws://relay.lan:7745"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(capsys: pytest.CaptureFixture[str], shell: str) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "sapo-edge" in script and "group-size" in script and "doctor" in script
    binary = shutil.which(shell)
    if binary is not None:  # the shell parses it
        ok = subprocess.run(
            [binary, "-n"], input=script, text=True, capture_output=True, timeout=30
        )
        assert ok.returncode == 0, ok.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize(
    ("words", "want", "not_want"),
    [
        (["sapo-edge", "do"], "doctor", "run"),
        (["sapo-edge", "run", "--group-s"], "--group-size", "--nodes"),
        (["sapo-edge", "sim", "--preset", "de"], "demo", "paper"),
        (["sapo-edge", "run", "--backend", "m"], "mlx", "cpu"),
    ],
)
def test_bash_completion_completes(
    capsys: pytest.CaptureFixture[str], words: list[str], want: str, not_want: str
) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    quoted = " ".join(f"'{w}'" for w in words)
    probe = f'{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _sapo_edge; echo "${{COMPREPLY[@]}}"'
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    got = done.stdout.split()
    assert want in got and not_want not in got, (done.stdout, done.stderr)


def test_a_busy_relay_port_is_a_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        line = one_line_error(capsys, ["relay", "--host", "127.0.0.1", "--port", str(port)])
    assert f"port {port} on 127.0.0.1 is already in use" in line and "--port" in line
    assert errno.EADDRINUSE  # the case the CLI turns into that sentence


def test_no_network_says_so_and_not_hf_hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")

    def snapshot_download(repo_id: str, **kw: object) -> str:
        raise OSError("[Errno -3] Temporary failure in name resolution")  # what no network gives

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(models.ModelNotFound) as e:
        models.resolve_model("someone/not-here", progress=lambda _m: None)
    msg = str(e.value)
    assert "there is no network" in msg and "HF_HUB_OFFLINE" not in msg
    assert "sapo-edge models --get smollm2-135m" in msg


def test_too_little_memory_is_refused_before_loading(
    tiny_qwen: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shape = fit.shape_from_config(tiny_qwen)
    assert shape is not None
    cfg = Config(model=str(tiny_qwen))
    need = fit.estimate_bytes(shape, cfg)
    monkeypatch.setattr(fit, "system_memory", lambda: fit.Memory(need / 2, need / 4, "RAM"))
    with pytest.raises(ConfigError, match=r"cannot fit\. Use a smaller model.*--no-memory-check"):
        fit.check_memory(tiny_qwen, "tiny", cfg, "cpu", 1, log=lambda _m: None)
    said: list[str] = []
    monkeypatch.setattr(fit, "system_memory", lambda: fit.Memory(need * 2, need / 2, "RAM"))
    fit.check_memory(tiny_qwen, "tiny", cfg, "cpu", 1, log=said.append)
    assert said and said[0].startswith("memory: training tiny needs about") and "close" in said[0]


def test_the_estimate_counts_the_parameters_of_a_real_model(tiny_qwen: Path) -> None:
    from safetensors import safe_open

    total = 0
    with safe_open(str(tiny_qwen / "model.safetensors"), "np") as f:
        for key in f.keys():
            total += _numel(f, key)
    shape = fit.shape_from_config(tiny_qwen)
    assert shape is not None and abs(shape.params - total) / total < 0.02  # norms and biases aside


def _numel(f, key: str) -> int:
    n = 1
    for d in f.get_slice(key).get_shape():
        n *= d
    return n


def test_estimates_grow_with_the_work() -> None:
    s = fit.KNOWN["Qwen/Qwen2.5-0.5B-Instruct"]
    base = fit.estimate_bytes(s, Config())
    assert fit.estimate_bytes(s, Config(max_new_tokens=1024)) > base
    assert fit.estimate_bytes(s, Config(micro_batch_size=8)) > base
    assert fit.estimate_bytes(s, Config(micro_batch_size=1), device="cuda:0") < base  # bfloat16
    # auto micro-batch: 1 on the CPU, 4 on a GPU
    assert fit.estimate_bytes(s, Config(micro_batch_size=4)) > base
    assert (Config().micro_batch("cpu"), Config().micro_batch("cuda:0")) == (1, 4)
    assert Config().micro_batch("gpu") == 4 and Config(micro_batch_size=3).micro_batch("cpu") == 3
    assert fit.estimate_bytes(fit.KNOWN["smollm2-135m"], Config()) < base


def test_the_relay_says_the_address_nodes_join_with(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sapo_edge.run import doctor
    from sapo_edge.swarm import relay

    started: list[tuple[str, int]] = []
    monkeypatch.setattr(doctor, "lan_addresses", lambda: ["192.168.1.20", "fd00::2"])
    monkeypatch.setattr(relay, "run_relay", lambda host, port, limits: started.append((host, port)))
    assert main(["relay"]) == 0
    out = capsys.readouterr().out
    assert "nodes join with: sapo-edge --relay 192.168.1.20:7745" in out
    assert "sapo-edge --relay [fd00::2]:7745" in out and started == [("0.0.0.0", 7745)]
