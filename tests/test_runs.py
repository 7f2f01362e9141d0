"""Run folders: a new one per run in the data folder, a used folder refused without --resume (with
the sentence that says what to do), `sapo-edge runs` and the resume command it prints."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sapo_edge.cli import main
from sapo_edge.config.settings import Config, ConfigError
from sapo_edge.data import paths
from sapo_edge.run.runs import list_runs, prepare_out_dir


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SAPO_EDGE_HOME", str(tmp_path / "home"))


def used(folder: Path, rounds: int = 2) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"name": "demo"}))
    lines = [json.dumps({"round": r, "reward_mean": 0.25}) for r in range(rounds)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_no_out_dir_gives_each_run_a_new_folder_in_the_data_folder(tmp_path: Path) -> None:
    a = prepare_out_dir(Config(name="demo", nodes=2), "sim")
    used(Path(a.out_dir) / "demo-0")
    b = prepare_out_dir(Config(name="demo", nodes=2), "sim")
    assert Path(a.out_dir).parent == Path(b.out_dir).parent == paths.runs_dir()
    assert a.out_dir != b.out_dir and paths.runs_dir() == tmp_path / "home" / "runs"


def test_a_used_folder_is_refused_without_resume(tmp_path: Path) -> None:
    used(tmp_path / "out" / "demo-0", rounds=3)
    with pytest.raises(ConfigError) as e:
        prepare_out_dir(Config(name="demo", nodes=2, out_dir=str(tmp_path / "out")), "sim")
    msg = str(e.value)
    assert "already holds a run (3 rounds recorded)" in msg
    assert "--resume" in msg and "--out-dir" in msg
    cfg = prepare_out_dir(
        Config(name="demo", nodes=2, out_dir=str(tmp_path / "out"), resume=True), "sim"
    )
    assert cfg.out_dir == str(tmp_path / "out")
    # a folder of another node name is not "used" by this one
    prepare_out_dir(Config(name="other", solo=True, out_dir=str(tmp_path / "out")), "run")


def test_resume_without_out_dir_finds_the_newest_run_of_this_node() -> None:
    first = Path(prepare_out_dir(Config(name="demo", nodes=1), "sim").out_dir)
    used(first / "demo-0")
    again = prepare_out_dir(Config(name="demo", nodes=1, resume=True), "sim")
    assert Path(again.out_dir) == first


def test_an_unwritable_output_folder_is_a_sentence_not_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"cannot write to the output folder .* pass --out-dir"):
        prepare_out_dir(Config(out_dir=str(blocker / "runs"), solo=True), "run")


def test_runs_lists_rounds_reward_checkpoint_and_the_resume_command(tmp_path: Path) -> None:
    used(tmp_path / "runs" / "r1" / "demo-0", rounds=4)
    used(tmp_path / "runs" / "r1" / "demo-1", rounds=3)
    (tmp_path / "runs" / "empty").mkdir()
    (info,) = list_runs(tmp_path / "runs")
    assert info.nodes == ["demo-0", "demo-1"] and info.rounds == 4 and info.last_reward == 0.25
    assert info.checkpoint is None
    assert info.resume.startswith("sapo-edge sim --config ") and info.resume.endswith("--resume")


@pytest.mark.slow
def test_rerun_refused_then_resumed_from_the_printed_command(
    tiny_qwen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs" / "one"
    argv = ["sim", "--preset", "demo", "--model", str(tiny_qwen), "--nodes", "1", "--rounds", "1"]
    argv += ["--checkpoint-every", "1", "--max-new-tokens", "8", "--out-dir", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2  # the same folder again, without --resume
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a run (1 rounds recorded)" in err[0], err
    assert main(["runs", "--out-dir", str(tmp_path / "runs")]) == 0
    listing = capsys.readouterr().out
    resume = next(ln for ln in listing.splitlines() if "resume:" in ln).split("resume: ", 1)[1]
    cmd = shlex.split(resume)
    assert cmd[:2] == ["sapo-edge", "sim"] and cmd[-1] == "--resume"
    assert main([*cmd[1:], "--rounds", "2"]) == 0
    lines = (out / "demo-0" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["round"] for ln in lines] == [0, 1]  # continued, not mixed


def test_runs_starting_together_with_one_out_dir_all_pass_the_write_check(
    tmp_path: Path, monkeypatch
) -> None:
    """The namespace LAN test's 1-in-N start failure: three nodes with one --out-dir check it at
    once; one removed the folder it had made for its check between another's mkdir and probe
    ("cannot write to the output folder ... (No such file or directory)")."""
    import tempfile

    from sapo_edge.run import runs

    out = tmp_path / "runs"
    real = tempfile.mkstemp
    calls = {"n": 0}

    def racing(*a, **kw):  # the other run's check removes the folder under this one, once
        calls["n"] += 1
        if calls["n"] == 1:
            out.rmdir()
        return real(*a, **kw)

    monkeypatch.setattr(runs.tempfile, "mkstemp", racing)
    runs._check_writable(out)  # raised ConfigError before
    assert calls["n"] == 2 and not out.exists()

    out.mkdir()  # another run made it and is probing it: this check leaves it be
    (out / ".write-test-other").write_text("")
    monkeypatch.setattr(runs.tempfile, "mkstemp", real)
    out2 = out / "sub"
    runs._check_writable(out2)
    assert out.is_dir()

    real_rmdir = Path.rmdir

    def busy(self):  # the folder this check made is in use by another run when it tidies up
        (self / "theirs").write_text("")
        return real_rmdir(self)

    monkeypatch.setattr(Path, "rmdir", busy)
    runs._check_writable(tmp_path / "shared")  # raised ConfigError (not empty) before
    assert (tmp_path / "shared" / "theirs").exists()
