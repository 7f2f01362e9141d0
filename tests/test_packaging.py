"""The built wheel, as a user gets it: metadata PyPI will show (license file, URLs, classifiers,
MLX on Apple Silicon by markers), the presets inside, and the installed command in a new
virtualenv with an empty HOME: --version, presets, models, doctor, a one-round headless run of
the packaged demo preset, `runs`. (packaging/check_install.sh does the same with real dependency
resolution; here the dependencies come from this venv so the test is offline and quick.)"""

from __future__ import annotations

import email
import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = out.glob("sapo_edge-*.whl")
    return path


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name))


def test_the_wheel_carries_license_presets_and_pypi_metadata(wheel: Path) -> None:
    from sapo_edge import __version__

    meta = metadata(wheel)
    assert meta["Version"] == __version__ and meta["License-Expression"] == "Apache-2.0"
    assert {"Homepage", "Source", "Issues"} <= {
        u.split(",")[0] for u in meta.get_all("Project-URL")
    }
    classifiers = meta.get_all("Classifier")
    assert "Operating System :: Microsoft :: Windows" in classifiers and len(classifiers) >= 8
    requires = meta.get_all("Requires-Dist")
    apple = "sys_platform == 'darwin' and platform_machine == 'arm64'"
    plain = [r.replace('"', "'") for r in requires if "extra ==" not in r]
    assert any(r.startswith("mlx>=") and r.endswith(apple) for r in plain)
    assert any(r.startswith("mlx-lm>=") and r.endswith(apple) for r in plain)
    assert any(r.startswith("platformdirs") for r in requires)
    assert not any(r.startswith("pycosat") for r in requires)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert {
        f"sapo_edge/presets/{p}.toml" for p in ("demo", "paper", "addition", "arithmetic")
    } <= set(names)
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert (
        "Apache License" in (ROOT / "LICENSE").read_text()
        and "Version 2.0" in (ROOT / "LICENSE").read_text()
    )


def test_twine_check_passes(wheel: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A new venv holding the wheel; its dependencies are this venv's (a .pth line), and the
    editable install of the checkout is not (.pth files in that folder are not run)."""
    root = tmp_path_factory.mktemp("user")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    (Path(purelib) / "borrowed_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps"]
        + ["--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    home = root / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SAPO_EDGE_", "XDG_", "HF_", "PYTEST", "VIRTUAL_ENV"))
    }
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", NO_COLOR="1")
    env["PATH"] = f"{py.parent}{os.pathsep}{env.get('PATH', '')}"
    return venv, env


def sapo(
    installed: tuple[Path, dict], *args: str, timeout: int = 300
) -> subprocess.CompletedProcess:
    venv, env = installed
    exe = venv / ("Scripts/sapo-edge.exe" if os.name == "nt" else "bin/sapo-edge")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=venv.parent
    )


@pytest.mark.slow
def test_the_installed_command_runs_from_the_wheel(installed: tuple[Path, dict]) -> None:
    venv, env = installed
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sapo_edge; print(sapo_edge.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=venv.parent,
    ).stdout
    assert where.startswith(str(venv)), where  # the wheel's copy, not the checkout
    from sapo_edge import __version__

    assert sapo(installed, "--version").stdout.strip() == f"sapo-edge {__version__}"
    presets = sapo(installed, "presets").stdout
    assert "demo" in presets and "paper" in presets
    models = sapo(installed, "models")
    assert models.returncode == 0 and "smollm2-135m" in models.stdout
    home = Path(env["HOME"])
    assert str(home / ".cache" / "sapo-edge") in models.stdout  # the OS's cache folder
    doc = sapo(installed, "doctor", "--multicast-interface", "127.0.0.1", "--listen", "127.0.0.1:0")
    assert doc.returncode in (0, 1) and "Traceback" not in doc.stderr
    assert len([ln for ln in doc.stdout.splitlines() if ln.startswith("[")]) == 12, doc.stdout


@pytest.mark.slow
def test_one_headless_round_of_the_packaged_demo_preset(
    installed: tuple[Path, dict], tiny_qwen: Path
) -> None:
    run = sapo(
        installed,
        "sim",
        "--preset",
        "demo",
        "--model",
        str(tiny_qwen),
        "--nodes",
        "1",
        "--rounds",
        "1",
        "--max-new-tokens",
        "8",
        "--checkpoint-every",
        "1",
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    home = Path(installed[1]["HOME"])
    runs_root = home / ".local" / "share" / "sapo-edge" / "runs"
    (run_dir,) = list(runs_root.iterdir())  # a new folder in the user's data folder
    record = json.loads((run_dir / "demo-0" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["round"] == 0
    saved = json.loads((run_dir / "demo-0" / "config.json").read_text())
    assert saved["preset"] == "demo" and saved["lenient"] is True
    listing = sapo(installed, "runs").stdout
    assert str(run_dir) in listing and "resume: sapo-edge sim --config" in listing
