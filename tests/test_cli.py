"""The sapo-edge command: flags mirror Config, flags > file > defaults, user errors exit 2 in one line."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sapo_edge.cli import build_parser, config_from_args, main
from sapo_edge.config.settings import Config

SCRIPT = Path(sys.executable).with_name("sapo-edge")


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a test gets wrong, the CLI must not reach the network or the user's model cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "sapo-edge-cache"))


def parse(*argv: str) -> Config:
    return config_from_args(build_parser().parse_args(list(argv)))


def user_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], kind: str = "config error"
) -> str:
    """Run main(argv), expect exit 2 ending stderr with one line `sapo-edge: KIND: ...`; return it.

    Config errors come before anything starts, so that line is all there is; later errors may
    follow library progress bars (transformers prints them while loading weights).
    """
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines and lines[-1].startswith(f"sapo-edge: {kind}: "), err
    assert [x for x in lines if x.startswith("sapo-edge:")] == lines[-1:]
    assert "Traceback" not in out + err
    if kind == "config error":
        assert out == "" and len(lines) == 1  # rejected before anything started
    return lines[-1]


def usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- help and models ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv", [["--help"], ["run", "--help"], ["sim", "--help"], ["models", "--help"]]
)
def test_help_exits_0(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    assert "usage: sapo-edge" in capsys.readouterr().out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "run" in out and "sim" in out and "models" in out


def test_models_lists_the_alias_and_the_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and f"cache: {tmp_path / 'sapo-edge-cache'}" in out


@pytest.mark.parametrize("command", ["run", "sim"])
def test_every_config_field_is_a_flag(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    flags = set(re.findall(r"--[a-z][a-z0-9-]*", capsys.readouterr().out))
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if f.name in ("nodes", "node_backends") and command == "run":
            assert flag not in flags  # sim only
        elif f.metadata.get("command", command) != command:
            assert flag not in flags  # the swarm network settings are run only, --hint host's
        else:
            assert flag in flags, f"{command} has no {flag}"


@pytest.mark.skipif(
    not SCRIPT.is_file(), reason="the sapo-edge console script is not installed in this venv"
)
def test_installed_command() -> None:
    ok = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "usage: sapo-edge" in ok.stdout
    ok = subprocess.run([str(SCRIPT), "models"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "smollm2-135m" in ok.stdout
    bad = subprocess.run(
        [str(SCRIPT), "sim", "--group-size", "1"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert (
        bad.stderr.startswith("sapo-edge: config error: group_size is 1")
        and bad.stderr.count("\n") == 1
    )


# --- precedence: flags > file > defaults ----------------------------------------------------------


def test_flags_beat_the_file_which_beats_the_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "group_size = 4\ntemperature = 0.7\nlenient = true\nnodes = 5\n[domains]\nbf = 1\n",
    )
    cfg = parse("sim", "--config", str(path), "--group-size", "6", "--top-p", "0.9")
    assert cfg.group_size == 6 and cfg.top_p == 0.9  # flags
    # from the file
    assert cfg.temperature == 0.7 and cfg.lenient is True and cfg.nodes == 5
    assert cfg.domains == {"bf": 1}
    # defaults
    assert (
        cfg.questions_per_round == 8 and cfg.learning_rate == 5e-5 and cfg.model == Config().model
    )


def test_no_flags_no_file_gives_the_defaults() -> None:
    assert parse("sim") == Config()
    assert parse("run") == Config()


def test_no_lenient_turns_off_a_file_setting(tmp_path: Path) -> None:
    on = write(tmp_path, "lenient = true\n", "on.toml")
    off = write(tmp_path, "lenient = false\n", "off.toml")
    # an unset flag leaves the file's value
    assert parse("run", "--config", str(on)).lenient is True
    assert parse("run", "--config", str(on), "--no-lenient").lenient is False
    assert parse("run", "--config", str(off), "--lenient").lenient is True
    assert parse("run", "--no-scale-rewards").scale_rewards is False


def test_domains_flag_takes_names_with_optional_weights(tmp_path: Path) -> None:
    assert parse("sim", "--domains", "basic_arithmetic:2,bf").domains == {
        "basic_arithmetic": 2.0,
        "bf": 1.0,
    }
    path = write(tmp_path, "[domains]\narc_1d = 1\nbf = 3\n")
    # the flag replaces the file's table rather than merging into it
    assert parse("sim", "--config", str(path), "--domains", "bf").domains == {"bf": 1.0}


def test_list_and_dict_flags() -> None:
    cfg = parse(
        "sim",
        "--lora-targets",
        "q_proj, v_proj",
        "--domains",
        "basic_arithmetic",
        "--domain-configs",
        '{"basic_arithmetic": {"max_digits": 1}}',
    )
    assert cfg.lora_targets == ["q_proj", "v_proj"]
    assert cfg.domain_configs == {"basic_arithmetic": {"max_digits": 1}}


# --- argparse-level errors (exit 2 with usage) ------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sim", "--group-size", "eight"], "argument --group-size: invalid int value: 'eight'"),
        (["sim", "--domains", "bf:heavy"], "domain weight 'heavy' in 'bf:heavy' is not a number"),
        (["sim", "--domains", ":2"], "':2' has no domain name: write NAME or NAME:WEIGHT"),
        (["sim", "--domain-configs", "{bf"], "--domain-configs: not valid JSON"),
        (["sim", "--domain-configs", "[1]"], "must be a JSON object such as"),
        (["run", "--nodes", "2"], "unrecognized arguments: --nodes 2"),
        (["train"], "invalid choice: 'train'"),
    ],
)
def test_malformed_flags_exit_2_with_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    err = usage_error(capsys, argv)
    assert expected in err and "usage: sapo-edge" in err and "Traceback" not in err


# --- config errors: exit 2, one line, no traceback -------------------------------------------------


def test_sim_group_size_1_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    line = user_error(capsys, ["sim", "--group-size", "1"])
    assert line == (
        "sapo-edge: config error: group_size is 1: GRPO compares completions within a group, so use 2 or more."
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sim", "--group-size", "-3"], "group_size is -3"),
        (["sim", "--temperature", "0"], "temperature is 0.0: use a positive number"),
        (["sim", "--temperature", "nan"], "temperature is nan: use a positive number"),
        (
            ["run", "--local-samples", "0", "--external-samples", "0"],
            "the paper's default is I=4, J=4",
        ),
        (["run", "--local-samples", "9"], "lower local_samples or raise questions_per_round"),
        (["run", "--max-new-tokens", "-1"], "max_new_tokens is -1: use 1 or more"),
        (["run", "--backend", "tpu"], "use one of auto, torch, cuda, mps, cpu, mlx"),
        (["run", "--dtype", "fp8"], "use one of auto, float32, bfloat16, float16"),
        (["run", "--share", "most"], "use one of all, informative, none"),
        (["run", "--lora-targets", ","], "lora_targets must be a non-empty list"),
        (["run", "--domains", "bf:0"], "give at least one domain a positive weight"),
        (
            ["run", "--domain-configs", '{"leg_counting": {}}'],
            "add it to domains or remove its config",
        ),
        (["sim", "--nodes", "0"], "nodes is 0: use 1 or more"),
    ],
)
def test_bad_flag_values_are_config_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert expected in user_error(capsys, argv)


def test_config_file_errors_are_config_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    typo = write(tmp_path, "group_sise = 4\n", "typo.toml")
    assert "Did you mean 'group_size'?" in user_error(capsys, ["sim", "--config", str(typo)])
    wrong = write(tmp_path, "group_size = 'eight'\n", "wrong.toml")
    assert "group_size should be int, got str 'eight'" in user_error(
        capsys, ["sim", "--config", str(wrong)]
    )
    broken = write(tmp_path, "group_size = \n", "broken.toml")
    assert "is not valid TOML" in user_error(capsys, ["sim", "--config", str(broken)])
    assert "cannot read config file" in user_error(
        capsys, ["sim", "--config", str(tmp_path / "none.toml")]
    )
    nan = write(tmp_path, '{"top_p": NaN}', "nan.json")
    assert "top_p is nan" in user_error(capsys, ["sim", "--config", str(nan)])


def test_file_domain_configs_must_match_flag_domains(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        "[domains]\nbasic_arithmetic = 1\n[domain_configs.basic_arithmetic]\nmax_digits = 1\n",
    )
    assert parse("sim", "--config", str(path)).domain_configs == {
        "basic_arithmetic": {"max_digits": 1}
    }
    line = user_error(capsys, ["sim", "--config", str(path), "--domains", "bf"])
    assert "domain_configs has 'basic_arithmetic', which is not among domains (bf)" in line


# --- other user errors: exit 2 with `sapo-edge: error:` ------------------------------------------


def test_unknown_model_is_a_user_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = user_error(
        capsys,
        [
            "run",
            "--headless",
            "--backend",
            "cpu",
            "--model",
            "not a model",
            "--out-dir",
            str(tmp_path),
        ],
        kind="error",
    )
    assert "model 'not a model' is neither a local directory" in line and "smollm2-135m" in line


def test_unknown_domain_is_a_user_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_qwen: Path
) -> None:
    argv = [
        "sim",
        "--backend",
        "cpu",
        "--model",
        str(tiny_qwen),
        "--nodes",
        "1",
        "--rounds",
        "0",
        "--domains",
        "basic_arithmetc",
        "--out-dir",
        str(tmp_path / "runs"),
    ]
    line = user_error(capsys, argv, kind="error")
    assert (
        "unknown reasoning-gym dataset 'basic_arithmetc' (did you mean 'basic_arithmetic'?)" in line
    )
