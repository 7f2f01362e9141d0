"""Run `make test` on a fresh clone of this checkout N times in a row, with busy programs beside
it (a laptop in class, or CI's machine, is never idle), and print the tally: each run's outcome,
its wall time and the tests that failed. Issue 29's check that the suite is always green.

    .venv/bin/python bench/suite_repeat.py --runs 10 --busy 1

Each run is a `git clone` of HEAD into WORK/repo (no caches, no build outputs, no files git does
not track), with `../shared` beside it as CI has it. The virtualenv is built once, by `make venv`
in the first clone, and moved into each new clone (its editable install points at WORK/repo, the
clone under test); `--venv-from DIR` takes an existing one instead, copied once. A failed run's
pytest output is kept in WORK/run-N.log. Busy programs are plain Python loops at normal
priority, each in its own session (with autogroup scheduling a niced loop in this process's
group would not compete the way another program does).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUSY = "while True: pass"


def sh(cmd: list[str], cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, text=True, **kw)


def fresh_clone(work: Path, venv: Path | None) -> Path:
    repo = work / "repo"
    if repo.exists():
        keep = repo / ".venv"
        if keep.exists():
            keep.rename(work / ".venv-kept")
        shutil.rmtree(repo)
    sh(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    kept = work / ".venv-kept"
    if kept.exists():
        kept.rename(repo / ".venv")
    elif venv is not None:
        shutil.copytree(venv, repo / ".venv", symlinks=True)
    marker = repo / ".venv" / ".installed"
    if marker.exists():
        marker.touch()  # newer than the clone's pyproject.toml: make keeps the venv
    return repo


def failures(log: str) -> list[str]:
    return sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", log, re.M)))


def summary_line(log: str) -> str:
    lines = [x for x in log.splitlines() if re.search(r"\d+ (passed|failed)", x)]
    return lines[-1].strip("= ") if lines else "(no pytest summary)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--busy", type=int, default=1, help="busy programs beside each run")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sapo-suite-repeat"))
    ap.add_argument("--venv-from", type=Path, default=None, help="a built .venv to copy once")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    shared = ROOT.parent / "shared"
    if shared.exists() and not (a.work / "shared").exists():
        (a.work / "shared").symlink_to(shared)
    head = sh(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True).stdout
    print(f"make test on fresh clones of HEAD ({head.strip()} now), {a.runs} runs, {a.busy} busy")
    busy = [
        subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)
        for _ in range(a.busy)
    ]
    rows = []
    try:
        for i in range(1, a.runs + 1):
            repo = fresh_clone(a.work, a.venv_from)
            cloned = sh(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True)
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            t0 = time.monotonic()
            got = sh(["make", "test"], cwd=repo, capture_output=True, env=env)
            wall = time.monotonic() - t0
            log = got.stdout + got.stderr
            failed = failures(log)
            ok = got.returncode == 0
            if not ok:
                (a.work / f"run-{i}.log").write_text(log)
            rows.append((i, ok, wall, summary_line(log), failed))
            print(
                f"run {i:2d} ({cloned.stdout.strip()}): {'pass' if ok else 'FAIL'}  {wall:6.0f} s"
                f"  {summary_line(log)}" + (f"  failed: {', '.join(failed)}" if failed else ""),
                flush=True,
            )
    finally:
        for p in busy:
            p.kill()
    passed = sum(ok for _, ok, *_ in rows)
    walls = sorted(w for _, _, w, *_ in rows)
    print(
        f"tally: {passed}/{len(rows)} passed; wall {walls[0]:.0f}-{walls[-1]:.0f} s "
        f"(median {walls[len(walls) // 2]:.0f} s)"
    )
    sys.exit(0 if passed == len(rows) else 1)


if __name__ == "__main__":
    main()
