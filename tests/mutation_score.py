"""`make mutate`'s summary: the mutation score per module from `mutmut results --all true`, and
the surviving mutants by name (`mutmut show NAME` prints one). Run from the repository root after
`mutmut run`. Killed counts mutants the tests failed on, or that timed out; every other outcome
(survived, no tests, suspicious) counts as not killed."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*(?P<name>[\w.ǁ]+__mutmut_\d+): (?P<status>.+?)\s*$")


def module_of(name: str) -> str:
    """sapo_edge.swarm.protocol.xǁHelloǁparse__mutmut_3 -> sapo_edge.swarm.protocol"""
    parts = name.split(".")
    while parts and not parts[-1].startswith("x"):
        parts.pop()
    return ".".join(parts[:-1])


def main() -> int:
    mutmut = Path(sys.executable).with_name("mutmut")
    out = subprocess.run(
        [str(mutmut), "results", "--all", "true"], capture_output=True, text=True, check=True
    ).stdout
    counts: dict[str, Counter] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        mod, status = module_of(m["name"]), m["status"]
        counts[mod][status] += 1
        if status not in ("killed", "timeout", "skipped", "not checked"):
            survivors[mod].append(f"{m['name']} ({status})")
    if not counts:
        print("no mutmut results: run `mutmut run` first", file=sys.stderr)
        return 1
    print(f"{'module':<28} {'mutants':>7} {'killed':>7} {'score':>7}")
    all_tested = all_killed = 0
    for mod in sorted(counts):
        c = counts[mod]
        tested = sum(c.values()) - c["skipped"] - c["not checked"]
        killed = c["killed"] + c["timeout"]
        all_tested, all_killed = all_tested + tested, all_killed + killed
        print(f"{mod:<28} {tested:>7} {killed:>7} {killed / max(tested, 1):>7.1%}")
    print(f"{'all':<28} {all_tested:>7} {all_killed:>7} {all_killed / max(all_tested, 1):>7.1%}")
    for mod in sorted(survivors):
        print(f"\nnot killed in {mod}:")
        print("\n".join(f"  {s}" for s in survivors[mod]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
