"""docs/results.md's hand notes quote only numbers its generated part holds (issue 56).

The check covers the notes' account of the evidence: from the notes marker to the first `## `
heading after `## Where the evidence stands`. The sections after it describe the method, the
commands, durations and simulated worlds, numbers no cell summary holds. A decimal in the
account must equal a number of the generated part, the generated one rounded half up to the
note's decimals ("0.97" may quote "0.965"; "-0.002" only a "-0.002"). The generated part is
rebuilt from the stored summaries first, so the notes are checked against what the summaries
say now, and the committed file must already be that rebuild."""

from __future__ import annotations

import re
import shutil
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

import evidence_report  # noqa: E402

DECIMAL = re.compile(r"(?<![\w.])[-+\u2212]?\d+\.\d+(?![\d.])")


def numbers(text: str) -> list[str]:
    return [m.group().replace("\u2212", "-").lstrip("+") for m in DECIMAL.finditer(text)]


def account(notes: str) -> str:
    """The notes' account of the evidence (see the module's docstring)."""
    start = notes.index("## Where the evidence stands")
    end = notes.find("\n## ", start + 1)
    return notes[start : end if end >= 0 else len(notes)]


def unquoted(account_text: str, generated: str) -> list[str]:
    """The account's decimals that no generated number rounds to."""
    held = numbers(generated)
    missing = []
    for x in numbers(account_text):
        step = Decimal(1).scaleb(-len(x.split(".")[1]))
        if not any(Decimal(y).quantize(step, ROUND_HALF_UP) == Decimal(x) for y in held):
            missing.append(x)
    return missing


def test_the_check_catches_a_misquote():
    generated = "| 4/4 | 0.558 [0.415, 0.692] | +0.965 | -0.006 |"
    assert unquoted("0.558 [0.415, 0.692], +0.97 a round, -0.006", generated) == []
    assert unquoted("seed 1's -0.002 and 0.700", generated) == ["-0.002", "0.700"]
    assert unquoted("0.006", generated) == ["0.006"]  # the sign is part of the number


def test_the_hand_notes_quote_only_numbers_the_tables_hold(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "evidence", docs / "evidence")
    committed = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    (docs / "results.md").write_text(committed, encoding="utf-8")
    rebuilt = evidence_report.write_results(docs).read_text(encoding="utf-8")
    generated, notes = rebuilt.split(evidence_report.NOTES, 1)
    assert committed == rebuilt, "docs/results.md is not what the summaries rebuild: run "
    "experiments/evidence_report.py and commit it"
    text = account(notes)
    assert len(numbers(text)) > 20  # the account really quotes the tables
    assert unquoted(text, generated) == []
