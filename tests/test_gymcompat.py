"""reasoning-gym without pycosat: the pure-Python stand-in solves like a SAT solver must, builds
the same zebra puzzles as the real pycosat, and every dataset sapo-edge offers builds without it."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sapo_edge.data import gymcompat

HERE = Path(__file__).resolve().parent
HAS_PYCOSAT = importlib.util.find_spec("pycosat") is not None and "stand-in" not in str(
    importlib.util.find_spec("pycosat").origin
)


def without_pycosat(code: str, timeout: int = 240) -> str:
    """Run code in a fresh interpreter where an installed pycosat cannot be found."""
    done = subprocess.run(
        [sys.executable, str(HERE / "blocked_imports.py"), "pycosat", "--", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def brute_force(clauses: list[tuple[int, ...]], n: int) -> set[tuple[int, ...]]:
    out = set()
    for bits in itertools.product((False, True), repeat=n):
        if all(any(bits[abs(x) - 1] == (x > 0) for x in c) for c in clauses):
            out.add(tuple(v if bits[v - 1] else -v for v in range(1, n + 1)))
    return out


literal = st.integers(1, 6).flatmap(lambda v: st.sampled_from([v, -v]))
cnf = st.lists(st.lists(literal, min_size=1, max_size=3).map(tuple), max_size=10)


@settings(max_examples=300, deadline=None)
@given(cnf)
def test_itersolve_finds_exactly_the_brute_force_solutions(clauses) -> None:
    n = max((abs(x) for c in clauses for x in c), default=0)
    found = [tuple(s) for s in gymcompat.itersolve(clauses)]
    assert len(found) == len(set(found))  # each assignment once
    assert set(found) == brute_force(clauses, n)
    one = gymcompat.solve(clauses)
    assert (one == "UNSAT") == (not found)
    if one != "UNSAT":
        assert tuple(one) in set(found)


def test_solver_edge_cases() -> None:
    assert gymcompat.solve([(1,), (-1,)]) == "UNSAT"
    assert list(gymcompat.itersolve([(1,), (-1,)])) == []
    assert gymcompat.solve([]) == []  # no variables: the empty assignment
    assert sorted(map(tuple, gymcompat.itersolve([(1, 2)], vars=3))) == sorted(
        brute_force([(1, 2)], 3)
    )
    with pytest.raises(ValueError):
        gymcompat.solve([(0,)])


@pytest.mark.skipif(not HAS_PYCOSAT, reason="the real pycosat is not installed")
def test_a_real_pycosat_wins_over_the_stand_in() -> None:
    gymcompat.install()
    import pycosat

    assert "stand-in" not in str(getattr(pycosat, "__version__", ""))


def test_without_pycosat_reasoning_gym_imports_only_through_the_stand_in() -> None:
    out = without_pycosat(
        "try:\n    import reasoning_gym\nexcept ModuleNotFoundError as e:\n    print('fails:', e.name)\n"
        "from sapo_edge.data.gymcompat import install\ninstall()\nimport reasoning_gym, pycosat\n"
        "print('stand-in:', pycosat.__version__)"
    )
    assert "fails: pycosat" in out and "stand-in: sapo-edge pure-Python stand-in" in out


ZEBRA = """
import hashlib, json
from sapo_edge.data.tasks import TaskRef, regenerate
for cfg in ({}, {"num_people": 3, "num_characteristics": 3}):
    items = [regenerate(TaskRef.make("zebra_puzzles", cfg, 11, i)) for i in range(3)]
    text = json.dumps([[t.question, t.answer] for t in items])
    print(hashlib.sha256(text.encode()).hexdigest())
"""


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PYCOSAT, reason="the real pycosat is not installed to compare with")
def test_zebra_puzzles_are_the_same_questions_with_the_stand_in() -> None:
    real = subprocess.run(
        [sys.executable, "-c", ZEBRA], capture_output=True, text=True, timeout=240, cwd=HERE.parent
    )
    assert real.returncode == 0, real.stderr[-2000:]
    assert without_pycosat(ZEBRA) == real.stdout and len(real.stdout.split()) == 2


@pytest.mark.slow
def test_every_offered_dataset_builds_without_pycosat() -> None:
    out = without_pycosat(
        "import json\nfrom sapo_edge.data.tasks import known_datasets, regenerate, TaskRef\n"
        "bad = {}\n"
        "for d in known_datasets():\n"
        "    try:\n        regenerate(TaskRef.make(d, {}, 0, 0))\n"
        "    except Exception as e:\n        bad[d] = str(e)[:200]\n"
        "import pycosat\n"
        "print(json.dumps({'n': len(known_datasets()), 'bad': bad, 'pycosat': pycosat.__version__}))"
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["bad"] == {} and result["n"] > 50
    assert result["pycosat"] == "sapo-edge pure-Python stand-in"
