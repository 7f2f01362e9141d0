"""Defaults chosen by time (pace.py): the round estimate, the choice among candidates, the
per-machine correction from real rounds, and bare `sapo-edge` offline."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from sapo_edge.config.settings import Config
from sapo_edge.machine import fit, pace
from sapo_edge.machine.pace_cache import TRANSFER, Correction, PaceCache, Rates

BIG = fit.Memory(32e9, 30e9, "RAM")
SMALL = fit.Memory(6e9, 4e9, "RAM")
QWEN = fit.KNOWN[pace.QWEN]
# an AVX2 laptop in float32 (the probe's figures on the AMD EPYC here: ~50 GFLOP/s, ~10 GB/s)
LAPTOP = Rates(gemm=50e9, bandwidth=10e9, bytes_per_param=4)
FAST = Rates(gemm=5e12, bandwidth=1e12, bytes_per_param=2)  # a machine that runs anything


def test_the_estimate_grows_with_every_kind_of_work() -> None:
    base = Config(model=pace.QWEN)
    est = pace.estimate(QWEN, base, LAPTOP)
    for change in (
        {"questions_per_round": 16},
        {"group_size": 16},
        {"max_new_tokens": 512},
    ):
        more = pace.estimate(QWEN, Config(**{**base.to_dict(), **change}), LAPTOP)
        assert more.round_s > est.round_s, change
    more_groups = Config(**{**base.to_dict(), "local_samples": 8})
    assert pace.estimate(QWEN, more_groups, LAPTOP).train_s > est.train_s
    assert pace.estimate(QWEN, base, LAPTOP).gen_s == est.gen_s  # deterministic
    small = pace.estimate(fit.KNOWN["smollm2-135m"], base, LAPTOP)
    assert small.round_s < est.round_s / 2  # a quarter of the parameters


def test_qwen_at_the_paper_settings_on_an_avx2_cpu_is_many_minutes() -> None:
    """The issue's measurement: ~17-30 min a round; the estimate must not call it a minute."""
    est = pace.estimate(QWEN, pace.CANDIDATES[0].config(), LAPTOP)
    assert est.round_s > 10 * 60


def test_a_fast_machine_gets_qwen_at_the_paper_settings() -> None:
    choice = pace.choose(BIG, "cpu", FAST, None)
    assert choice.candidate is pace.CANDIDATES[0]
    assert choice.candidate.settings == {"model": pace.QWEN, "preset": "paper"}


def test_a_slow_cpu_gets_the_first_candidate_within_the_target_qwen_before_smollm2() -> None:
    choice = pace.choose(BIG, "cpu", LAPTOP, None, target=60)
    ests = [
        pace.estimate(fit.KNOWN[c.settings["model"]], c.config(), LAPTOP) for c in pace.CANDIDATES
    ]
    first_ok = next(i for i, e in enumerate(ests) if e.round_s <= 60)
    assert choice.candidate is pace.CANDIDATES[first_ok]
    assert all(e.round_s > 60 for e in ests[:first_ok])
    assert "within the 60 s target" in choice.why and "a round ~" in choice.why
    # a longer target allows more work, never less
    slower = pace.choose(BIG, "cpu", LAPTOP, None, target=3600)
    assert pace.CANDIDATES.index(slower.candidate) <= first_ok


def test_when_nothing_is_within_the_target_the_fastest_that_fits_is_chosen_and_said() -> None:
    crawl = Rates(gemm=1e9, bandwidth=0.5e9, bytes_per_param=4)
    choice = pace.choose(BIG, "cpu", crawl, None, target=60)
    assert choice.candidate.settings["model"] == "smollm2-135m"
    assert "over the 60 s target" in choice.why and choice.over_target  # (doctor warns by it)
    assert not pace.choose(BIG, "cpu", FAST, None).over_target


def test_offline_without_qwen_cached_the_cached_offline_model_is_used_and_said() -> None:
    choice = pace.choose(BIG, "cpu", FAST, None, available=lambda m: m == "smollm2-135m")
    assert choice.candidate.settings == {"model": "smollm2-135m", "preset": "addition"}
    assert "not on this machine and the hub cannot be reached" in choice.why


def test_memory_still_rules_and_a_gpu_is_chosen_by_memory_alone() -> None:
    choice = pace.choose(fit.Memory(3e9, 2e9, "RAM"), "cpu", FAST, None)
    assert choice.candidate.settings["model"] == "smollm2-135m" and "needs ~" in choice.why
    gpu = pace.choose(fit.Memory(16e9, 15e9, "NVIDIA H100"), "cuda:0", None, None)
    assert gpu.candidate is pace.CANDIDATES[0] and gpu.estimate is None


def test_each_candidate_is_a_valid_config_and_its_settings_are_cli_flags() -> None:
    from sapo_edge.cli import build_parser, config_from_args

    for cand in pace.CANDIDATES:
        cfg = cand.config()
        assert cfg.model == cand.settings["model"]
        flags = []
        for k, v in cand.settings.items():
            flags += [f"--{k.replace('_', '-')}", str(v)]
        args = build_parser().parse_args(["run", *flags])
        assert config_from_args(args).to_dict() == cfg.to_dict(), cand.label


def test_the_correction_learns_from_real_rounds_and_survives_a_restart(tmp_path: Path) -> None:
    cache = PaceCache.load("machine A", tmp_path / "pace.json")
    assert cache.correction(pace.QWEN) == Correction()
    key = "float32/2 threads"
    cache.rates[key] = {"gemm": LAPTOP.gemm, "bandwidth": LAPTOP.bandwidth, "bpp": 4}
    cfg = pace.CANDIDATES[3].config()  # Qwen on addition
    # a round whose answers ended early: 14 decode steps, 150 tokens; the correction is of the
    # machine's speed on that work, not of how long answers happened to be
    did = pace.gen_seconds(QWEN, cfg, LAPTOP, 14, 150)
    report = SimpleNamespace(
        gen_seconds=did * 2.0, gen_steps=14, gen_tokens=150, train_seconds=30.0,
        train_tokens=200, local_used=2, external_used=0,
    )  # fmt: skip
    pace.learn_from_round(cfg, pace.QWEN, report, cache, key)
    again = PaceCache.load("machine A", tmp_path / "pace.json")
    corr = again.correction(pace.QWEN)
    assert corr.measured and corr.gen == pytest.approx(2.0)
    trained = pace.train_seconds(QWEN, 200 + 2 * pace.PROMPT_TOKENS, LAPTOP)
    assert corr.train == pytest.approx(30.0 / trained)
    est = pace.estimate(QWEN, cfg, LAPTOP)
    corrected = pace.estimate(QWEN, cfg, LAPTOP, corr)
    assert corrected.gen_s == pytest.approx(est.gen_s * 2.0) and corrected.corrected
    # a second round halfway (geometric) toward its own ratio
    report.gen_seconds = did * 8.0
    pace.learn_from_round(cfg, "hub:" + pace.QWEN, report, again, key)  # a class's marked name
    assert again.correction(pace.QWEN).gen == pytest.approx(4.0)
    # a round that trained nothing teaches nothing about the step
    report.train_tokens, report.train_seconds, report.gen_steps = 0, 0.0, 0
    before = again.correction(pace.QWEN).train
    pace.learn_from_round(cfg, pace.QWEN, report, again, key)
    assert again.correction(pace.QWEN).train == before
    # rates of another thread count (a pinned run) teach nothing
    report.gen_seconds, report.gen_steps = did * 100.0, 14
    pace.learn_from_round(cfg, pace.QWEN, report, again, "float32/1 threads")
    assert again.correction(pace.QWEN).gen == pytest.approx(4.0)
    # a model never run here borrows the machine's correction, within bounds
    assert again.correction("smollm2-135m").gen == TRANSFER[1]
    # the alias's model id counts for the alias
    pace.learn_from_round(
        pace.CANDIDATES[4].config(), "HuggingFaceTB/SmolLM2-135M-Instruct", report, again, key
    )
    assert again.corrections["smollm2-135m in float32"]


def test_only_a_run_with_every_core_teaches_the_machine_s_pace(tmp_path, monkeypatch) -> None:
    """control.run_rounds hands each of a session's first rounds to the backend's learn_pace,
    which learns only from an adaptive run (not one pinned to fewer threads)."""
    from sapo_edge.run import control

    taught = []

    class Node:
        def __init__(self) -> None:
            self.round, self.cfg, self.model_id, self.saved = 0, Config(), "m", None
            self.name, self.callback = "n", None  # as trainer.Node: its watchers (none)
            self.backend = SimpleNamespace(learn_pace=lambda *a: taught.append(a[2]))

        def run_round(self):
            self.round += 1
            return f"report {self.round}"

        def save(self):
            return tmp_path

    control.run_rounds(Node(), 6, None, lambda _m: None)
    assert taught == [f"report {i}" for i in range(1, control.LEARN_ROUNDS + 1)]


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"machine": "machine A", "corrections": {"q": {"gen": 1e9}}}',
     '{"machine": "machine B", "corrections": {"q": {"gen": 2}}}',
     '{"machine": "machine A", "rates": {"float32": {"gemm": "fast"}}}',
     '{"machine": "machine A", "rates": {"float32": {"gemm": 0, "bandwidth": 1, "bpp": 4}}}',
     '{"machine": "machine A", "rates": {"float32": {"gemm": -5, "bandwidth": 1, "bpp": 4}}}',
     '{"machine": "machine A", "rates": {"float32": {"gemm": NaN, "bandwidth": 1, "bpp": 4}}}',
     '{"machine": "machine A", "corrections": {"q": {"gen": NaN}}}'],
)  # fmt: skip
def test_a_damaged_or_foreign_cache_is_measured_again(tmp_path: Path, text: str) -> None:
    path = tmp_path / "pace.json"
    path.write_text(text)
    cache = PaceCache.load("machine A", path)
    assert cache.correction("q") == Correction()
    probed = []
    rates = cache.rates_for("float32", lambda: probed.append(1) or LAPTOP)
    assert rates == LAPTOP and probed == [1]
    assert json.loads(path.read_text())["machine"] == "machine A"


def test_bare_run_offline_picks_a_model_it_has_and_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from sapo_edge import cli
    from sapo_edge.backends import rates
    from sapo_edge.models import resolve as models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # nothing cached
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "cache"))  # not the user's pace.json
    monkeypatch.delenv("SAPO_EDGE_PACE_RATES")  # measure (a stand-in for the probe)
    monkeypatch.setattr(rates, "measure_rates", lambda _dtype: FAST)
    monkeypatch.setattr(models, "smollm2_gguf", lambda: tmp_path / "x.gguf")
    args = cli.build_parser().parse_args(["run"])
    settings = cli._first_run_choice(args)
    assert settings == {"model": "smollm2-135m", "preset": "addition"}
    err = capsys.readouterr().err
    assert "choosing for this machine: smollm2-135m on one-digit addition" in err
    assert "Qwen/Qwen2.5-0.5B-Instruct is not on this machine" in err
    args = cli.build_parser().parse_args(["run", "--model", "x/y"])
    assert cli._first_run_choice(args) == {}  # the person chose
    # the CLI applies the choice the way the user would type it
    typed = shlex.split("run --model smollm2-135m --preset addition")
    assert cli.config_from_args(cli.build_parser().parse_args(typed)).model == "smollm2-135m"


def test_hub_reachable_is_false_offline_without_touching_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from sapo_edge.models import resolve as models

    def no(*_a, **_k):
        raise AssertionError("dialled out")

    monkeypatch.setattr(socket, "create_connection", no)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not models.hub_reachable()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.school:3128")  # only a download can tell
    assert models.hub_reachable()
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.test:8080")
    asked: list = []

    def refuse(addr, timeout):
        asked.append(addr)
        raise OSError("refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(models, "_REACHABLE", {})
    assert not models.hub_reachable() and not models.hub_reachable()
    assert asked == [("mirror.test", 8080)]  # the mirror, asked once
    assert not models.available("Qwen/Qwen2.5-0.5B-Instruct", reachable=lambda: False)


def test_a_slow_laptop_in_a_qwen_class_lightens_its_work_and_says_so() -> None:
    cls = Config.load("", {"preset": "paper", "model": "hub:" + pace.QWEN, "round_target": 60})
    cfg, note = pace.keep_pace(cls, LAPTOP, None)
    assert note and "still shares its text with the class" in note and "--model" in note
    assert cfg.model == "hub:smollm2-135m"  # a class-given name: never a path on this disk
    mine = pace.estimate(fit.KNOWN["smollm2-135m"], cfg, LAPTOP)
    theirs = pace.estimate(QWEN, cls, LAPTOP)
    assert mine.round_s < theirs.round_s
    # the class's task, group size and reward stay: what it shares is the class's kind of text
    for key in ("domains", "group_size", "external_samples", "lenient", "max_new_tokens"):
        assert getattr(cfg, key) == getattr(cls, key), key


def test_a_laptop_that_keeps_the_class_pace_keeps_the_class_settings() -> None:
    cls = Config.load("", {"preset": "addition", "round_target": 60})
    assert pace.keep_pace(cls, LAPTOP, None) == (cls, None)
    qwen_cls = Config.load("", {"preset": "paper", "model": pace.QWEN})
    assert pace.keep_pace(qwen_cls, FAST, None) == (qwen_cls, None)
    unknown = Config.load("", {"preset": "addition", "model": "some/model"})
    assert pace.keep_pace(unknown, LAPTOP, None) == (unknown, None)


def test_a_lighter_class_setting_prefers_fewer_questions_on_the_same_model_when_that_keeps_pace() -> (
    None
):
    cls = Config.load("", {"preset": "addition", "model": pace.QWEN, "questions_per_round": 8,
                           "round_target": 60})  # fmt: skip
    mid = Rates(gemm=6e10, bandwidth=2e10, bytes_per_param=4)
    cfg, note = pace.keep_pace(cls, mid, None)
    assert pace.estimate(QWEN, cls, mid).round_s > 2 * 60
    assert pace.estimate(QWEN, cfg, mid).round_s <= 2 * 60
    assert cfg.model == pace.QWEN and cfg.questions_per_round == 4 and "4 questions" in note
