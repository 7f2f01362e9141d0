"""Shared pytest fixtures: a tiny random Qwen2 model directory, built offline once per session."""

from __future__ import annotations

import os
from pathlib import Path

# `make test` runs two pytest-xdist workers. Each one's torch (and every node process it starts)
# gets its share of the cores, set here before anything imports torch: two workers of two
# OpenMP threads each on two cores spin against each other (a 3 s model test took 57 s).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    _share = (_cores or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

import pytest
from tiny_model import build_tiny_qwen  # pytest's default import mode puts tests/ on sys.path


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory loadable by AutoModelForCausalLM / AutoTokenizer.from_pretrained (2 layers, ~770 tokens)."""
    return build_tiny_qwen(tmp_path_factory.mktemp("tiny-qwen"))


@pytest.fixture(autouse=True)
def _own_identity_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """No test reads or writes the user's ~/.config/sapo-edge (the node identity lives there)."""
    monkeypatch.setenv("SAPO_EDGE_HOME", str(tmp_path_factory.mktemp("sapo-edge-home")))
    # --dtype auto means float32 in tests on every CPU (test_cpu_dtype.py covers the choice)
    monkeypatch.setenv("SAPO_EDGE_CPU_DTYPE", "float32")
    # pace.py's estimates use an AVX2 laptop's rates, not a probe of this (loaded) machine's,
    # and no correction from rounds run here (test_pace.py covers the probe and the cache)
    monkeypatch.setenv("SAPO_EDGE_PACE_RATES", "5e10,1e10")
    # no test reaches the Hugging Face hub (nor asks whether it could): offline, as CI is
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def nodes():
    """Start loopback NetworkTransports (short heartbeats) on demand; all closed afterwards."""
    from swarm_util import net

    made = []

    def make(**kw):
        made.append(net(**kw))
        return made[-1]

    yield make
    for n in made:
        n.close()
