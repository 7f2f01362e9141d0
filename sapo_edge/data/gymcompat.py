"""reasoning-gym without a C compiler: a pure-Python stand-in for `pycosat` when it is absent.

reasoning-gym pins pycosat==0.6.6, which PyPI ships only as C source; the documented installs
exclude it (see packaging/README.md), and `import reasoning_gym` then needs this stand-in: its
logic package imports pycosat at import time, and only zebra_puzzles calls it. zebra_puzzles
asks a solver whether a puzzle has exactly one solution and checks that solution, so any
complete solver builds the same questions (tests/test_gymcompat.py compares with pycosat).
The stand-in is found only when no real pycosat is installed (its finder comes last).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Iterable, Iterator

Clause = tuple[int, ...]


def _propagate(clauses: list[Clause], assign: dict[int, bool]) -> bool:
    """Unit propagation in place; False on a conflict."""
    changed = True
    while changed:
        changed = False
        for clause in clauses:
            free, satisfied = None, False
            n_free = 0
            for lit in clause:
                value = assign.get(abs(lit))
                if value is None:
                    n_free += 1
                    free = lit
                elif value == (lit > 0):
                    satisfied = True
                    break
            if satisfied:
                continue
            if n_free == 0:
                return False
            if n_free == 1:
                assign[abs(free)] = free > 0  # type: ignore[arg-type]
                changed = True
    return True


def _search(clauses: list[Clause], n_vars: int, assign: dict[int, bool]) -> dict[int, bool] | None:
    """DPLL: propagate, then branch on the first unassigned variable (False first)."""
    if not _propagate(clauses, assign):
        return None
    var = next((v for v in range(1, n_vars + 1) if v not in assign), None)
    if var is None:
        return assign
    for value in (False, True):
        found = _search(clauses, n_vars, {**assign, var: value})
        if found is not None:
            return found
    return None


def _clauses(cnf: Iterable[Iterable[int]]) -> tuple[list[Clause], int]:
    clauses = [tuple(int(x) for x in c) for c in cnf]
    if any(x == 0 for c in clauses for x in c):
        raise ValueError("0 is not a literal")
    return clauses, max((abs(x) for c in clauses for x in c), default=0)


def solve(cnf: Iterable[Iterable[int]], vars: int = 0, **_: object) -> list[int] | str:
    """pycosat.solve: a full assignment [±1, ±2, ...] or "UNSAT"."""
    clauses, n = _clauses(cnf)
    n = max(n, int(vars))
    found = _search(clauses, n, {})
    if found is None:
        return "UNSAT"
    return [v if found[v] else -v for v in range(1, n + 1)]


def itersolve(cnf: Iterable[Iterable[int]], vars: int = 0, **_: object) -> Iterator[list[int]]:
    """pycosat.itersolve: every full assignment, each blocked once found."""
    clauses, n = _clauses(cnf)
    n = max(n, int(vars))
    while True:
        found = _search(clauses, n, {})
        if found is None:
            return
        solution = [v if found[v] else -v for v in range(1, n + 1)]
        yield solution
        if not solution:
            return
        clauses.append(tuple(-x for x in solution))


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Provides `pycosat` only when every other finder failed (it sits last on sys.meta_path)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002
        if fullname != "pycosat":
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin="sapo-edge stand-in")

    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module) -> None:
        module.solve = solve
        module.itersolve = itersolve
        module.__version__ = "sapo-edge pure-Python stand-in"
        module.__doc__ = __doc__


_FINDER = _Finder()


def install() -> None:
    """Let `import pycosat` fall back to the stand-in (idempotent; a real pycosat wins)."""
    # cellpylib's `memoize is "recursive"` warns once, when a fresh install first compiles it:
    # noise on a new user's first run that they can do nothing about
    warnings.filterwarnings("ignore", category=SyntaxWarning, message='"is" with a literal')
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
