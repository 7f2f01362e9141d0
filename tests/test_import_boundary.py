"""The import boundary the README promises: torch and MLX (and the libraries built on them) are
imported only under sapo_edge/backends/, Textual only under sapo_edge/tui/. Checked twice: in the
source of every module (any import statement, at any depth, lazy ones included), and at run time
(importing every other module loads none of them)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sapo_edge"

# top-level module -> the only package folder whose modules may import it
ONLY_UNDER = {
    "torch": "backends",
    "mlx": "backends",
    "mlx_lm": "backends",
    "transformers": "backends",
    "peft": "backends",
    "textual": "tui",
    "textual_plotext": "tui",
}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imported_roots(tree: ast.AST) -> set[str]:
    """Top-level names of the absolute imports anywhere in a module (function bodies too)."""
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def offences(path: Path) -> list[str]:
    rel = path.relative_to(PACKAGE)
    roots = imported_roots(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return [
        f"{rel} imports {name} (allowed only under sapo_edge/{folder}/)"
        for name, folder in ONLY_UNDER.items()
        if name in roots and rel.parts[0] != folder
    ]


def test_the_check_sees_lazy_and_dotted_imports():
    src = "def f():\n    import torch.nn as nn\n    from textual.app import App\nfrom . import x\n"
    assert imported_roots(ast.parse(src)) == {"torch", "textual"}


def test_frameworks_are_imported_only_in_their_own_folders():
    assert len(modules()) > 50  # the walk really found the package
    found = [o for p in modules() for o in offences(p)]
    assert found == []


CORE = [
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in modules()
    if p.relative_to(PACKAGE).parts[0] not in ("backends", "tui") and p.name != "__main__.py"
]


def test_importing_every_core_module_loads_no_framework():
    """Every module outside backends/ and tui/ (cli, runner, trainer, swarm, classroom, ...)
    imported in a fresh interpreter: none of the frameworks is in sys.modules after."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {CORE!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(n for n in {sorted(ONLY_UNDER)!r} if n in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert "sapo_edge.trainer" in CORE and "sapo_edge.swarm.network" in CORE


@pytest.mark.parametrize("name", ["backends", "tui"])
def test_the_frameworks_folders_exist(name):
    assert (PACKAGE / name / "__init__.py").is_file()  # a rename would make the rule vacuous
