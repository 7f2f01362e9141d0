"""Config: paper defaults, TOML/JSON loading, precedence, and errors that say how to fix them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sapo_edge.config.settings import LORA_TARGETS, PAPER_DOMAINS, Config, ConfigError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def config_error(tmp_path: Path, toml: str) -> str:
    with pytest.raises(ConfigError) as e:
        Config.load(write(tmp_path, "c.toml", toml))
    return str(e.value)


# --- defaults ------------------------------------------------------------------------------


def test_defaults_follow_the_paper() -> None:
    cfg = Config()
    assert (cfg.questions_per_round, cfg.group_size) == (8, 8)
    assert (cfg.local_samples, cfg.external_samples) == (4, 4)
    assert list(cfg.domains) == list(PAPER_DOMAINS) and len(cfg.domains) == 9
    assert cfg.lora_targets == LORA_TARGETS
    assert cfg.lenient is False and cfg.partial_credit is False and cfg.beta == 0.0


def test_mutable_defaults_are_not_shared_between_configs() -> None:
    a = Config()
    a.domains["bf"] = 5.0
    a.lora_targets.append("lm_head")
    b = Config()
    assert b.domains["bf"] == 1.0 and "lm_head" not in b.lora_targets
    assert "lm_head" not in LORA_TARGETS


def test_every_field_has_help_text() -> None:
    cfg = Config()
    for name in cfg.to_dict():
        assert cfg.help(name).strip(), f"{name} has no help text"


# --- validation: each bad value names the setting and the fix --------------------------------

BAD_VALUES = [
    ({"group_size": 1}, "group_size is 1", "use 2 or more"),
    ({"group_size": -4}, "group_size is -4", "use 2 or more"),
    (
        {"local_samples": 0, "external_samples": 0},
        "local_samples + external_samples is 0",
        "I=4, J=4",
    ),
    ({"local_samples": 9}, "exceeds questions_per_round (8)", "lower local_samples"),
    ({"local_samples": -1}, "local_samples (I)", "must be 0 or more"),
    ({"external_samples": -2}, "external_samples (J)", "must be 0 or more"),
    ({"questions_per_round": 0}, "questions_per_round is 0", "use 1 or more"),
    ({"max_new_tokens": -5}, "max_new_tokens is -5", "use 1 or more"),
    ({"max_prompt_tokens": 8}, "max_prompt_tokens is 8", "use 16 or more"),
    ({"micro_batch_size": -1}, "micro_batch_size", "0 (auto) or more"),
    ({"lora_r": -1}, "lora_r is -1", "use 1 or more"),
    ({"nodes": 0}, "nodes is 0", "use 1 or more"),
    ({"rounds": -1}, "rounds", "0 or more"),
    ({"share_max": -1}, "share_max", "0 (no cap) or more"),
    ({"keep_checkpoints": 0}, "keep_checkpoints", "1 or more"),
    ({"temperature": 0.0}, "temperature is 0.0", "use a positive number"),
    ({"temperature": -1.0}, "temperature is -1.0", "use a positive number"),
    ({"top_p": 0.0}, "top_p is 0.0", "(0, 1]"),
    ({"top_p": 1.5}, "top_p is 1.5", "(0, 1]"),
    ({"learning_rate": 0.0}, "learning_rate is 0.0", "such as 5e-5"),
    ({"max_peer_share": 0.0}, "max_peer_share is 0.0", "(0, 1]"),
    ({"external_sampling": "smart"}, "external_sampling 'smart'", "one of uniform, targeted"),
    ({"targeted_share": 0.0}, "targeted_share is 0.0", "(0, 1]"),
    ({"targeted_share": float("nan")}, "targeted_share is nan", "(0, 1]"),
    (
        {"external_sampling": "targeted", "local_samples": 0},
        "never trains only on peers",
        "raise local_samples",
    ),
    ({"lenient_credit": 2.0}, "lenient_credit", "[0, 1]"),
    ({"clip_low": 1.0}, "clip_low", "[0, 1)"),
    ({"lora_dropout": 1.0}, "lora_dropout", "[0, 1)"),
    ({"backend": "tpu"}, "backend 'tpu' is unknown", "use one of auto, torch, cuda, mps, cpu, mlx"),
    ({"node_backends": ["torch", "tpu"]}, "node_backends ['torch', 'tpu']", "comma list of auto"),
    ({"dtype": "fp8"}, "dtype 'fp8' is unknown", "use one of auto, float32, bfloat16, float16"),
    ({"share": "some"}, "share 'some' is unknown", "use one of all, informative, none"),
    ({"model": "  "}, "model is empty", "--model NAME_OR_PATH"),
    ({"name": "my node"}, "name 'my node'", "letters, digits, '-' and '_'"),
    ({"lora_targets": []}, "lora_targets", "non-empty list of module names"),
    ({"domains": {}}, "domains", "map domain names to weights"),
    ({"domains": {"bf": -1.0}}, "domains.bf: weight -1.0", "a number 0 or more"),
    (
        {"domains": {"bf": 0}},
        "every domain weight is 0",
        "give at least one domain a positive weight",
    ),
    (
        {"domains": {"basic_arithmetic": 1.0}, "domain_configs": {"bf": {"difficulty": 1}}},
        "domain_configs has 'bf', which is not among domains (basic_arithmetic)",
        "add it to domains or remove its config",
    ),
    ({"domain_configs": {"bf": 3}}, "domain_configs", "table of reasoning-gym settings"),
]


@pytest.mark.parametrize(("values", "what", "fix"), BAD_VALUES, ids=[str(v[0]) for v in BAD_VALUES])
def test_bad_value_is_a_one_line_config_error_naming_the_fix(
    values: dict, what: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as e:
        Config.from_dict(values)
    msg = str(e.value)
    assert what in msg and fix in msg
    assert "\n" not in msg


def test_config_error_is_a_value_error() -> None:
    # the CLI reports ValueErrors as user errors; ConfigError must stay one of them
    assert issubclass(ConfigError, ValueError)


def test_isolated_and_local_only_nodes_are_valid() -> None:
    assert Config(local_samples=0, external_samples=8).local_samples == 0
    assert Config(local_samples=8, external_samples=0).external_samples == 0


def test_nan_in_a_json_config_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "c.json", '{"temperature": NaN}')
    with pytest.raises(ConfigError, match=r"temperature is nan: use a positive number"):
        Config.load(path)
    path = write(tmp_path, "d.json", '{"domains": {"bf": NaN}}')
    with pytest.raises(ConfigError, match=r"domains\.bf: weight nan must be a number 0 or more"):
        Config.load(path)


# --- unknown keys and types ------------------------------------------------------------------


def test_unknown_key_suggests_the_closest_setting(tmp_path: Path) -> None:
    msg = config_error(tmp_path, "group_sise = 4\n")
    assert "unknown setting 'group_sise'" in msg and "Did you mean 'group_size'?" in msg
    assert "c.toml" in msg  # says which file


def test_unknown_key_without_a_close_match_points_at_the_list(tmp_path: Path) -> None:
    msg = config_error(tmp_path, "zzzz = 1\n")
    assert "unknown setting 'zzzz'" in msg and "Did you mean" not in msg
    assert "sapo-edge run --help" in msg


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("group_size = 'eight'", "group_size should be int, got str 'eight'"),
        ("group_size = true", "group_size should be int, got bool True"),
        ("group_size = 8.5", "group_size should be int, got float 8.5"),
        ("temperature = true", "temperature should be float, got bool True"),
        ("temperature = '0.7'", "temperature should be float, got str '0.7'"),
        ("lenient = 'yes'", "lenient should be bool, got str 'yes'"),
        ("lenient = 1", "lenient should be bool, got int 1"),
        ("lora_targets = 'q_proj'", "lora_targets should be list, got str 'q_proj'"),
        ("domains = ['bf']", "domains should be dict, got list ['bf']"),
        ("model = 5", "model should be str, got int 5"),
    ],
)
def test_wrong_type_names_the_setting_and_the_type_wanted(
    tmp_path: Path, toml: str, expected: str
) -> None:
    assert expected in config_error(tmp_path, toml + "\n")


def test_an_int_is_accepted_for_a_float_setting(tmp_path: Path) -> None:
    cfg = Config.load(write(tmp_path, "c.toml", "temperature = 1\nlearning_rate = 1\n"))
    assert cfg.temperature == 1.0 and isinstance(cfg.temperature, float)
    assert isinstance(cfg.learning_rate, float)


# --- files -----------------------------------------------------------------------------------


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        Config.load(tmp_path / "nope.toml")
    msg = str(e.value)
    assert "cannot read config file" in msg and "nope.toml" in msg and "--config" in msg


def test_directory_given_as_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.load(tmp_path)


def test_binary_config_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe\x00group_size = 4")
    with pytest.raises(ConfigError) as e:
        Config.load(path)
    assert "c.toml" in str(e.value) and "UTF-8" in str(e.value)


def test_invalid_toml_says_where(tmp_path: Path) -> None:
    msg = config_error(tmp_path, "group_size = 4\ntemperature =\n")
    assert "is not valid TOML" in msg and "line 2" in msg and "\n" not in msg


def test_invalid_json_says_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        Config.load(write(tmp_path, "c.json", '{"group_size": 4,}'))
    assert "is not valid JSON" in str(e.value) and "line 1" in str(e.value)


def test_json_file_must_hold_an_object(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must hold a table of settings"):
        Config.load(write(tmp_path, "c.json", "[1, 2]"))


def test_file_overrides_defaults_and_overrides_beat_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "c.toml",
        "group_size = 4\ntemperature = 0.7\nlenient = true\n"
        "[domains]\nbasic_arithmetic = 2\n"
        "[domain_configs.basic_arithmetic]\nmax_digits = 1\n",
    )
    cfg = Config.load(path, {"group_size": 6, "lenient": False})
    assert cfg.group_size == 6 and cfg.lenient is False  # overrides
    assert cfg.temperature == 0.7 and cfg.domains == {"basic_arithmetic": 2}  # file
    assert cfg.domain_configs == {"basic_arithmetic": {"max_digits": 1}}
    assert cfg.top_p == 1.0 and cfg.questions_per_round == 8  # defaults


def test_an_override_can_make_a_valid_file_invalid(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", "local_samples = 4\n")
    with pytest.raises(
        ConfigError, match=r"local_samples \(I=4\) exceeds questions_per_round \(2\)"
    ):
        Config.load(path, {"questions_per_round": 2})


def test_no_file_uses_overrides_over_defaults() -> None:
    cfg = Config.load(None, {"rounds": 3})
    assert cfg.rounds == 3 and cfg.group_size == 8
    with pytest.raises(ConfigError, match="flags: unknown setting 'round'. Did you mean 'rounds'?"):
        Config.load(None, {"round": 3})


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    cfg = Config(
        group_size=4, lenient=True, domains={"bf": 1.0, "arc_1d": 0.5}, lora_targets=["q_proj"]
    )
    path = tmp_path / "run" / "node" / "config.json"
    cfg.save(path)
    assert json.loads(path.read_text())["group_size"] == 4
    assert Config.load(path) == cfg


def test_the_demo_config_loads() -> None:
    cfg = Config.load(EXAMPLES / "demo.toml")
    assert cfg.model == "smollm2-135m" and cfg.domains == {"basic_arithmetic": 1.0}
    assert cfg.domain_configs["basic_arithmetic"]["operators"] == ["+"]


def test_a_node_goes_by_its_name_flag_else_its_identity_s():
    """run, join and host name their node one way (issue 46: no default-name trick each)."""
    assert Config().node_name("keen-lemur") == "keen-lemur"
    assert Config(name="anna").node_name("keen-lemur") == "anna"
