"""`sapo-edge` without a subcommand is `run`: the dashboard in a terminal, one line per round
otherwise (a bare `sapo-edge` in a pipe prints the help, see test_cli.py)."""

import sys

import sapo_edge.tui.app as tui_app
from sapo_edge.cli import main


def test_no_subcommand_in_a_terminal_opens_the_dashboard(monkeypatch):
    opened = []
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(tui_app, "run_dashboard", lambda cfg: opened.append(cfg) or 0)
    assert main(["--rounds", "3", "--name", "lab-1"]) == 0
    assert [(c.rounds, c.name) for c in opened] == [(3, "lab-1")]
    assert main(["run", "--rounds", "4"]) == 0 and opened[-1].rounds == 4
    assert main([]) == 0 and opened[-1].rounds == 100  # bare `sapo-edge`: defaults


def test_headless_or_not_a_terminal_never_opens_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tui_app, "run_dashboard", lambda cfg: (_ for _ in ()).throw(AssertionError))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    missing = str(tmp_path / "missing.gguf")
    assert main(["run", "--headless", "--model", missing]) == 2
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert main(["--model", missing]) == 2  # no subcommand, piped: headless `run`
    assert "does not exist" in capsys.readouterr().err
