"""The CLI's command table (issue 46: was an if-chain): every subcommand the parser knows has
one entry, and nothing else has one."""

from __future__ import annotations

import argparse

from sapo_edge.cli import COMMANDS, build_parser, main


def test_every_subcommand_has_one_entry_and_no_entry_is_stray():
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) == set(COMMANDS)


def test_a_table_command_runs_through_main(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "aha " in out and "demo " in out
