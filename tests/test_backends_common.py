"""backends/common.py: the shared-base registry both backends use (one base per key, one
adapter name per process, the base gone with its last node) and the other-backend check."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sapo_edge.backends.common import SharedBases, written_by_other


def test_a_base_is_loaded_once_shared_and_gone_with_its_last_node():
    bases, loads = SharedBases(), []

    def load():
        loads.append(1)
        return SimpleNamespace(adapters=set())

    a, fresh = bases.take("k", "ada", load, "ada")
    a.adapters.add("ada")
    b, again = bases.take("k", "bob", load, "bob")
    b.adapters.add("bob")
    assert a is b and (fresh, again) == (True, False) and loads == [1]
    with pytest.raises(ValueError, match="two nodes named 'ada' in one process"):
        bases.take("k", "ada", load, "ada")
    assert bases.release(a, "ada") is True  # bob still runs on it
    assert bases.release(a, "bob") is False and "k" not in bases.bases
    c, fresh = bases.take("k", "ada", load, "ada")
    assert fresh and c is not a and loads == [1, 1]


def test_a_failed_load_leaves_nothing_behind():
    bases = SharedBases()

    def fail():
        raise ValueError("no chat template")

    with pytest.raises(ValueError, match="no chat template"):
        bases.take("k", "ada", fail, "ada")
    assert bases.bases == {}


def test_a_checkpoint_of_the_other_backend_names_it(tmp_path):
    (tmp_path / "optimizer.pt").write_bytes(b"x")
    with pytest.raises(ValueError, match="--backend torch"):
        written_by_other(tmp_path, "optimizer.safetensors", "optimizer.pt", "torch")
    written_by_other(tmp_path, "optimizer.pt", "optimizer.safetensors", "mlx")  # its own: fine
