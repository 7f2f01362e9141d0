"""Checkpoints: a save is all-or-nothing, a kill or a flipped byte never hides the last good one."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sapo_edge.rl.checkpoints import CheckpointError, find_latest, list_checkpoints, save_checkpoint

REPO = Path(__file__).resolve().parents[1]


def writer(payload: bytes):
    """A stand-in backend: writes an adapter file and a nested optimizer file."""

    def write(d: Path) -> None:
        (d / "adapter.safetensors").write_bytes(payload)
        (d / "adapter_config.json").write_text('{"r": 8}')
        (d / "opt").mkdir()
        (d / "opt" / "optimizer.pt").write_bytes(payload[::-1])

    return write


def save(root: Path, rnd: int, keep: int = 3) -> Path:
    state = {"round": rnd, "config": {"lr": 1e-5}, "sampler": [1, 2, 3]}
    return save_checkpoint(root, rnd, writer(f"weights-{rnd}".encode() * 100), state, keep=keep)


def tmp_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".tmp-"))


def test_round_trip(tmp_path: Path) -> None:
    path = save(tmp_path, 7)
    assert path == tmp_path / "round-000007"
    ckpt = find_latest(tmp_path, log=pytest.fail)
    assert ckpt is not None
    assert (ckpt.path, ckpt.round) == (path, 7)
    assert ckpt.state == {"round": 7, "config": {"lr": 1e-5}, "sampler": [1, 2, 3]}
    assert (path / "adapter.safetensors").read_bytes() == b"weights-7" * 100
    assert (path / "opt" / "optimizer.pt").read_bytes() == (b"weights-7" * 100)[::-1]
    manifest = json.loads((path / "MANIFEST.json").read_text())["files"]
    assert set(manifest) == {
        "adapter.safetensors",
        "adapter_config.json",
        "opt/optimizer.pt",
        "state.json",
    }
    assert (path / "COMPLETE").is_file()
    assert tmp_dirs(tmp_path) == []


def test_empty_or_missing_root_has_no_checkpoint(tmp_path: Path) -> None:
    assert find_latest(tmp_path / "nothing-here", log=pytest.fail) is None
    assert find_latest(tmp_path, log=pytest.fail) is None
    assert list_checkpoints(tmp_path) == []


def test_failing_write_files_leaves_previous_latest(tmp_path: Path) -> None:
    save(tmp_path, 1)

    def half_then_crash(d: Path) -> None:
        (d / "adapter.safetensors").write_bytes(b"half")
        raise RuntimeError("backend exploded")

    with pytest.raises(RuntimeError, match="backend exploded"):
        save_checkpoint(tmp_path, 2, half_then_crash, {"round": 2})
    ckpt = find_latest(tmp_path, log=pytest.fail)
    assert ckpt is not None and ckpt.round == 1
    assert tmp_dirs(tmp_path) == []
    assert not (tmp_path / "round-000002").exists()


def test_process_killed_mid_save_leaves_previous_latest(tmp_path: Path) -> None:
    save(tmp_path, 1)
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from sapo_edge.rl.checkpoints import save_checkpoint

        def write(d):
            (d / "adapter.safetensors").write_bytes(b"partial")
            os.kill(os.getpid(), signal.SIGKILL)

        save_checkpoint(Path({str(tmp_path)!r}), 2, write, {{"round": 2}})
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert len(tmp_dirs(tmp_path)) == 1  # the killed save's debris
    (tmp_path / "round-000003").mkdir()  # a round dir that never got its COMPLETE marker
    (tmp_path / "round-000003" / "adapter.safetensors").write_bytes(b"x")

    logs: list[str] = []
    ckpt = find_latest(tmp_path, log=logs.append)
    assert ckpt is not None and ckpt.round == 1
    assert len(logs) == 1 and "round-000003" in logs[0] and "no COMPLETE marker" in logs[0]

    save(tmp_path, 4)  # the next save clears crash debris
    assert tmp_dirs(tmp_path) == []
    assert [p.name for p in list_checkpoints(tmp_path)] == ["round-000001", "round-000004"]
    assert not (tmp_path / "round-000003").exists()


def test_tmp_dir_of_a_live_process_is_not_pruned(tmp_path: Path) -> None:
    live = tmp_path / f".tmp-round-000009-{os.getppid()}-abcd1234"  # our parent is alive
    live.mkdir(parents=True)
    save(tmp_path, 1)
    assert live.is_dir()


def test_tmp_dirs_left_by_this_process_or_a_dead_one_are_pruned(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ours = tmp_path / f".tmp-round-000009-{os.getpid()}-abcd1234"  # an earlier save of ours
    gone = tmp_path / f".tmp-round-000009-{int(dead.stdout)}-abcd1234"
    for d in (ours, gone):
        d.mkdir(parents=True)
    save(tmp_path, 1)
    assert tmp_dirs(tmp_path) == []


def _rewrite(path: Path, name: str, data: bytes) -> None:
    """Replace one file of a checkpoint and make its manifest agree (a consistent bad save)."""
    import hashlib

    (path / name).write_bytes(data)
    manifest = json.loads((path / "MANIFEST.json").read_text())
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (path / "MANIFEST.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"{not json", "unreadable state.json"), (b"[1, 2]", "state.json is not a JSON object")],
)
def test_a_state_json_that_is_no_json_object_is_skipped_with_its_reason(
    tmp_path: Path, data: bytes, reason: str
) -> None:
    save(tmp_path, 1)
    path = save(tmp_path, 2)
    _rewrite(path, "state.json", data)
    logs: list[str] = []
    ckpt = find_latest(tmp_path, log=logs.append)
    assert ckpt is not None and ckpt.round == 1
    assert logs == [f"skipping checkpoint {path}: corrupt: {reason}"]


def test_flipped_byte_is_skipped_with_message(tmp_path: Path) -> None:
    save(tmp_path, 1)
    newest = save(tmp_path, 2)
    adapter = newest / "adapter.safetensors"
    data = bytearray(adapter.read_bytes())
    data[10] ^= 0x01
    adapter.write_bytes(bytes(data))

    logs: list[str] = []
    ckpt = find_latest(tmp_path, log=logs.append)
    assert ckpt is not None and ckpt.round == 1
    assert logs == [
        f"skipping checkpoint {newest}: corrupt: file adapter.safetensors hash mismatch"
    ]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: (p / "opt" / "optimizer.pt").unlink(), "file opt/optimizer.pt missing"),
        (lambda p: (p / "state.json").write_text("{not json"), "file state.json size"),
        (lambda p: (p / "MANIFEST.json").write_text("garbage"), "unreadable MANIFEST.json"),
        (lambda p: (p / "COMPLETE").unlink(), "no COMPLETE marker"),
    ],
)
def test_damaged_checkpoints_fall_back(tmp_path: Path, damage, reason: str) -> None:
    save(tmp_path, 1)
    damage(save(tmp_path, 2))
    logs: list[str] = []
    ckpt = find_latest(tmp_path, log=logs.append)
    assert ckpt is not None and ckpt.round == 1
    assert len(logs) == 1 and "round-000002" in logs[0] and reason in logs[0]


def test_nothing_loadable_returns_none(tmp_path: Path) -> None:
    path = save(tmp_path, 1)
    (path / "adapter.safetensors").write_bytes(b"tampered")
    logs: list[str] = []
    assert find_latest(tmp_path, log=logs.append) is None
    assert len(logs) == 1


def test_pruning_keeps_newest(tmp_path: Path) -> None:
    for rnd in range(1, 6):
        save(tmp_path, rnd, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["round-000004", "round-000005"]
    # re-saving an old round never deletes the checkpoint just written
    save(tmp_path, 2, keep=2)
    assert (tmp_path / "round-000002" / "COMPLETE").is_file()
    assert find_latest(tmp_path, log=pytest.fail).round == 5


def test_resaving_a_round_replaces_it(tmp_path: Path) -> None:
    save(tmp_path, 3)
    (tmp_path / "round-000003" / "stale.bin").write_bytes(b"old")
    save_checkpoint(tmp_path, 3, writer(b"new weights"), {"round": 3, "second": True})
    ckpt = find_latest(tmp_path, log=pytest.fail)
    assert ckpt is not None and ckpt.state == {"round": 3, "second": True}
    assert (ckpt.path / "adapter.safetensors").read_bytes() == b"new weights"
    assert not (ckpt.path / "stale.bin").exists()
    assert tmp_dirs(tmp_path) == []


def test_a_failed_resave_of_a_round_keeps_the_old_one(tmp_path: Path, monkeypatch) -> None:
    """Re-saving round N (a run whose rounds are a multiple of checkpoint_every saves its last
    round twice) moves the old round-N aside first: if publishing the new one fails, the old one
    is put back, never lost."""
    import sapo_edge.rl.checkpoints as checkpoints

    save(tmp_path, 3)
    real_rename = os.rename

    def rename(src, dst) -> None:
        if Path(src).name.startswith(".tmp-round-"):  # publishing the new round-000003
            raise OSError(errno.EIO, "I/O error")
        real_rename(src, dst)

    monkeypatch.setattr(checkpoints.os, "rename", rename)
    with pytest.raises(OSError, match="I/O error"):
        save_checkpoint(tmp_path, 3, writer(b"new weights"), {"round": 3, "second": True})
    monkeypatch.undo()
    ckpt = find_latest(tmp_path, log=pytest.fail)
    assert ckpt is not None and ckpt.round == 3 and ckpt.state["config"] == {"lr": 1e-5}
    assert (ckpt.path / "adapter.safetensors").read_bytes() == b"weights-3" * 100
    assert tmp_dirs(tmp_path) == []


def test_a_state_json_missing_from_the_manifest_is_not_trusted(tmp_path: Path) -> None:
    save(tmp_path, 1)
    path = save(tmp_path, 2)
    manifest = json.loads((path / "MANIFEST.json").read_text())
    del manifest["files"]["state.json"]  # state.json could now say anything unnoticed
    (path / "MANIFEST.json").write_text(json.dumps(manifest))
    (path / "state.json").write_text('{"round": 99}')
    logs: list[str] = []
    ckpt = find_latest(tmp_path, log=logs.append)
    assert ckpt is not None and ckpt.round == 1
    assert logs == [f"skipping checkpoint {path}: corrupt: state.json not listed in manifest"]


@pytest.mark.parametrize("state", [{"obj": object()}, {"loss": float("nan")}, {"t": (1, {2})}])
def test_non_json_state_raises_before_writing(tmp_path: Path, state: dict) -> None:
    save(tmp_path, 1)
    called = []
    with pytest.raises(CheckpointError, match="not plain JSON"):
        save_checkpoint(tmp_path, 2, lambda d: called.append(d), state)
    assert called == []
    assert [p.name for p in tmp_path.iterdir()] == ["round-000001"]


def test_disk_full_is_a_clear_error_and_loses_nothing(tmp_path: Path) -> None:
    save(tmp_path, 1)

    def full(d: Path) -> None:
        (d / "adapter.safetensors").write_bytes(b"some")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match="no space left on .* free space or lower keep"):
        save_checkpoint(tmp_path, 2, full, {"round": 2})
    assert find_latest(tmp_path, log=pytest.fail).round == 1
    assert tmp_dirs(tmp_path) == []


def test_backend_may_not_write_reserved_names(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="reserves"):
        save_checkpoint(tmp_path, 1, lambda d: (d / "COMPLETE").write_text("x"), {})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("rnd", "keep"), [(-1, 3), (1, 0), (True, 3)])
def test_bad_arguments(tmp_path: Path, rnd, keep) -> None:
    with pytest.raises(CheckpointError):
        save_checkpoint(tmp_path, rnd, writer(b"x"), {}, keep=keep)


def test_round_zero_keep_one_and_the_default_keep_of_three(tmp_path: Path) -> None:
    assert save(tmp_path / "zero", 0).name == "round-000000"  # a run saved before its first round
    for rnd in range(1, 4):
        save(tmp_path / "one", rnd, keep=1)
    assert [p.name for p in list_checkpoints(tmp_path / "one")] == ["round-000003"]
    for rnd in range(1, 6):
        save_checkpoint(tmp_path / "dflt", rnd, writer(b"w"), {"round": rnd})
    assert [p.name[-1] for p in list_checkpoints(tmp_path / "dflt")] == ["3", "4", "5"]
    with pytest.raises(CheckpointError, match="keep must be an integer >= 1, got 0"):
        save_checkpoint(tmp_path, 1, writer(b"w"), {}, keep=0)
    with pytest.raises(CheckpointError, match="round must be a non-negative integer, got -1"):
        save_checkpoint(tmp_path, -1, writer(b"w"), {})
    with pytest.raises(CheckpointError, match="checkpoint state must be a dict, got list"):
        save_checkpoint(tmp_path, 1, writer(b"w"), [])  # type: ignore[arg-type]


# --- what a checkpoint holds byte for byte, fsync order, names and sentences --------------------
# (from `make mutate`'s survivors; reference values computed here with hashlib, not the module)


def test_a_checkpoints_files_byte_for_byte(tmp_path: Path) -> None:
    import hashlib

    path = save_checkpoint(tmp_path, 7, writer(b"w" * 3000), {"b": [1], "a": 1}, keep=3)
    assert path == tmp_path / "round-000007"
    assert (path / "COMPLETE").read_text() == "round 7\n"
    assert (path / "state.json").read_text() == '{\n  "a": 1,\n  "b": [\n    1\n  ]\n}'
    manifest = json.loads((path / "MANIFEST.json").read_text())
    names = ["adapter.safetensors", "adapter_config.json", "opt/optimizer.pt", "state.json"]
    assert (manifest["version"], manifest["round"], sorted(manifest["files"])) == (1, 7, names)
    for name in names:
        data = (path / name).read_bytes()
        want = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        assert manifest["files"][name] == want, name
    assert (path / "MANIFEST.json").read_text().startswith('{\n  "version": 1,\n  "round": 7,')


def test_every_file_and_directory_is_fsynced_deepest_first_before_the_rename(
    tmp_path: Path, monkeypatch
) -> None:
    import sapo_edge.rl.checkpoints as checkpoints

    synced: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    renamed_after: list[int] = []

    def rename(src, dst) -> None:
        renamed_after.append(len(synced))
        real_rename(src, dst)

    monkeypatch.setattr(checkpoints.os, "fsync", fsync)
    monkeypatch.setattr(checkpoints.os, "rename", rename)
    path = save_checkpoint(tmp_path, 1, writer(b"x" * 10), {"round": 1})
    tmp = Path(synced[0]).parent if Path(synced[0]).name == "state.json" else None
    assert tmp is not None and tmp.name.startswith(".tmp-round-000001-")
    before = synced[: renamed_after[0]]
    files = ["adapter.safetensors", "adapter_config.json", "opt/optimizer.pt", "state.json"]
    for name in [*files, "MANIFEST.json", "COMPLETE"]:
        assert str(tmp / name) in before, name
    dirs = [p for p in before if p in (str(tmp), str(tmp / "opt"))]
    assert dirs == [str(tmp / "opt"), str(tmp)]  # the deeper directory first
    assert synced[renamed_after[0] :] == [str(tmp_path)]  # the root after the rename
    assert path.is_dir()


def test_round_dirs_are_named_with_at_least_six_digits_and_sorted_by_number(tmp_path: Path) -> None:
    for rnd in (999_999, 1_000_000, 5):
        save(tmp_path, rnd, keep=5)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["round-000005", "round-999999", "round-1000000"]  # not string order
    assert find_latest(tmp_path, log=pytest.fail).round == 1_000_000
    # names that are not round dirs: too few digits, a prefix, a plain file
    for odd in ("round-12345", "xround-000009", "round-000009x"):
        (tmp_path / odd).mkdir()
        (tmp_path / odd / "COMPLETE").write_text("round 9\n")
    (tmp_path / "round-000010").write_text("a file, not a directory")
    (tmp_path / "notes").mkdir()
    assert [p.name for p in list_checkpoints(tmp_path)] == names
    assert find_latest(tmp_path, log=pytest.fail).round == 1_000_000
    save(tmp_path, 6, keep=5)  # pruning leaves what is not its own alone
    for odd in ("round-12345", "xround-000009", "round-000009x", "round-000010", "notes"):
        assert (tmp_path / odd).exists(), odd


def test_find_latest_logs_to_stdout_by_default(tmp_path: Path, capsys) -> None:
    save(tmp_path, 1)
    path = save(tmp_path, 2)
    (path / "COMPLETE").unlink()
    assert find_latest(tmp_path).round == 1
    assert capsys.readouterr().out == (
        f"skipping checkpoint {path}: partial: no COMPLETE marker (the save was interrupted)\n"
    )
    assert find_latest(tmp_path / "none") is None and list_checkpoints(tmp_path / "none") == []


def test_a_size_mismatch_names_both_sizes(tmp_path: Path) -> None:
    save(tmp_path, 1)
    path = save(tmp_path, 2)
    size = (path / "state.json").stat().st_size
    (path / "state.json").write_text("{}")
    logs: list[str] = []
    assert find_latest(tmp_path, log=logs.append).round == 1
    assert logs == [
        f"skipping checkpoint {path}: corrupt: file state.json size 2 != {size} in manifest"
    ]


@pytest.mark.parametrize(
    "manifest",
    [
        "[]",
        '{"files": []}',
        '{"files": {"state.json": {"size": "x", "sha256": "0"}}}',
        '{"files": {"a": 5}}',
        "{}",
    ],
)
def test_any_malformed_manifest_is_skipped_not_raised(tmp_path: Path, manifest: str) -> None:
    save(tmp_path, 1)
    path = save(tmp_path, 2)
    (path / "MANIFEST.json").write_text(manifest)
    logs: list[str] = []
    assert find_latest(tmp_path, log=logs.append).round == 1
    assert logs == [f"skipping checkpoint {path}: corrupt: missing or unreadable MANIFEST.json"]


def test_refusals_in_their_exact_words(tmp_path: Path) -> None:
    def refusal(*args, **kw) -> str:
        with pytest.raises(CheckpointError) as e:
            save_checkpoint(*args, **kw)
        return str(e.value)

    w = writer(b"w")
    assert refusal(tmp_path, True, w, {}) == "round must be a non-negative integer, got True"
    assert refusal(tmp_path, 1.0, w, {}) == "round must be a non-negative integer, got 1.0"
    assert refusal(tmp_path, 1, w, {}, keep=True) == (
        "keep must be an integer >= 1, got True; use 1 to keep only the latest"
    )
    assert refusal(tmp_path, 1, w, {}, keep=2.0) == (
        "keep must be an integer >= 1, got 2.0; use 1 to keep only the latest"
    )
    msg = refusal(tmp_path, 1, w, {"x": float("inf")})
    assert msg.startswith("checkpoint state is not plain JSON (")
    assert msg.endswith("); store only str/int/float/bool/list/dict, no NaN")
    assert refusal(tmp_path, 1, lambda d: (d / "state.json").write_text("{}"), {}) == (
        "write_files created state.json, a name the checkpoint reserves; rename that file"
    )
    assert refusal(tmp_path, 1, lambda d: (d / "MANIFEST.json").write_text("{}"), {}) == (
        "write_files created MANIFEST.json, a name the checkpoint reserves; rename that file"
    )
    assert not tmp_path.exists() or tmp_dirs(tmp_path) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_disk_full_or_over_quota_says_what_to_do_in_full(tmp_path: Path, code: int) -> None:
    def full(d: Path) -> None:
        raise OSError(code, os.strerror(code))

    with pytest.raises(CheckpointError) as e:
        save_checkpoint(tmp_path, 4, full, {}, keep=2)
    assert str(e.value) == (
        f"no space left on the disk holding {tmp_path} while saving round 4; "
        "free space or lower keep (now 2) — earlier checkpoints are intact"
    )
    assert isinstance(e.value.__cause__, OSError)
    with pytest.raises(OSError) as other:  # any other OSError passes through as it is
        save_checkpoint(tmp_path, 4, lambda d: (_ for _ in ()).throw(OSError(errno.EIO, "io")), {})
    assert not isinstance(other.value, CheckpointError)


def test_a_save_that_fails_before_its_temp_dir_exists_raises_its_own_error(tmp_path: Path) -> None:
    """The cleanup of a temp dir that was never made must not hide the real error."""
    root = tmp_path / "a-file"
    root.write_text("not a directory")
    with pytest.raises(OSError) as e:
        save_checkpoint(root, 1, writer(b"w"), {})
    assert type(e.value) is FileExistsError


def test_a_failed_first_publish_raises_its_own_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    import sapo_edge.rl.checkpoints as checkpoints

    real_rename = os.rename

    def rename(src, dst) -> None:
        if Path(src).name.startswith(".tmp-round-"):  # publishing round-000001
            raise OSError(errno.EIO, "I/O error")
        real_rename(src, dst)  # anything else it tries (there is nothing to put back)

    monkeypatch.setattr(checkpoints.os, "rename", rename)
    with pytest.raises(OSError) as e:
        save_checkpoint(tmp_path, 1, writer(b"w"), {})
    assert e.value.errno == errno.EIO and "I/O error" in str(e.value)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_checking_a_live_writer_only_asks_and_never_signals_it(tmp_path: Path) -> None:
    # default actions for every signal a wrong one could be (not inherited: nohup ignores HUP)
    code = (
        "import signal, sys, time\n"
        "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):\n"
        "    signal.signal(s, signal.SIG_DFL)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        live = tmp_path / f".tmp-round-000009-{child.pid}-abcd1234"
        live.mkdir(parents=True)
        save(tmp_path, 1)
        assert live.is_dir()  # its writer is alive: left alone
        with pytest.raises(subprocess.TimeoutExpired):  # still running: signal 0 only asks
            child.wait(timeout=1)
    finally:
        child.kill()
        child.wait(timeout=30)
        child.stdout.close()


def test_a_writer_we_may_not_signal_counts_as_alive(tmp_path: Path, monkeypatch) -> None:
    """Another user's process: os.kill(pid, 0) raises PermissionError; its temp dir stays."""
    import sapo_edge.rl.checkpoints as checkpoints

    def kill(pid: int, sig: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    other = tmp_path / ".tmp-round-000009-999999-abcd1234"
    other.mkdir(parents=True)
    monkeypatch.setattr(checkpoints.os, "kill", kill)
    save(tmp_path, 1)
    assert other.is_dir()


def test_a_root_whose_parents_do_not_exist_yet_is_made(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "node" / "checkpoints"
    assert save(root, 1) == root / "round-000001"
    assert find_latest(root, log=pytest.fail).round == 1
