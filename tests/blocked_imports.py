"""Run Python code as if some modules were not installed (Windows has no resource, fcntl, ...).

`python tests/blocked_imports.py [--from PREFIX] MOD1,MOD2 -- CODE` runs CODE with those
top-level modules unimportable; an installed module is hidden from the path finders, other
finders still answer (so sapo-edge's own stand-ins, which sit on sys.meta_path, are found).
With --from PREFIX only imports made by modules named PREFIX... are refused: third-party
libraries keep their Linux branches (on Windows they take their own).
"""

from __future__ import annotations

import importlib.machinery
import sys


def _importer() -> str:
    """__name__ of the module whose code runs the import (importlib's own frames skipped)."""
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_globals.get("__name__", "").startswith("importlib")
    ):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


class Hide:
    def __init__(self, names: set[str], prefix: str = ""):
        self.names, self.prefix = names, prefix

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.names:
            return None
        if self.prefix and not _importer().startswith(self.prefix):
            return None
        for finder in sys.meta_path:
            if finder is self or finder is importlib.machinery.PathFinder:
                continue
            if finder.__class__.__name__ in ("BuiltinImporter", "FrozenImporter"):
                continue  # resource, fcntl, termios ... may be built in
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        raise ModuleNotFoundError(f"No module named {fullname!r} (hidden)", name=fullname)


def hide(names: set[str], prefix: str = "") -> None:
    if not prefix:
        for name in list(sys.modules):
            if name.partition(".")[0] in names:
                del sys.modules[name]
    sys.meta_path.insert(0, Hide(names, prefix))


if __name__ == "__main__":
    args = sys.argv[1:]
    prefix = ""
    if args[0] == "--from":
        prefix, args = args[1], args[2:]
    names, sep, code = args[0], args[1], args[2]
    assert sep == "--"
    hide(set(names.split(",")), prefix)
    exec(compile(code, "<blocked>", "exec"), {"__name__": "__main__"})
