"""End of class: `sapo-edge report RUN_DIR` writes the class table (CSV, JSON) and two PNG plots
from the host's class.jsonl; members' names cannot become spreadsheet formulas or math markup;
a folder without a class says which folder to pass."""

from __future__ import annotations

import csv
import json

from class_recorded import ADA, HOST, HOSTILE, recorded_board
from PIL import Image

from sapo_edge.classroom.host import INFO_FILE
from sapo_edge.cli import main
from sapo_edge.swarm.stats import RoundStats


def test_report_writes_the_table_and_the_plots(tmp_path, capsys) -> None:
    board = recorded_board(tmp_path / "class.jsonl")
    for name, node in (('=HYPERLINK("http://x")', "e" * 32), ("$\\frac{1}{$ ^_^", "f" * 32)):
        board.record(node, RoundStats(0, 0.5, 1, 1, 0, 0, {}, name, "m", "torch", "cpu"))
    with open(tmp_path / "class.jsonl", "a") as f:
        f.write("not json\n")  # a torn last line: counted, not fatal
    (tmp_path / INFO_FILE).write_text(json.dumps({"host_id": HOST, "task": "addition"}))
    assert main(["report", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    assert [p.rsplit("/", 1)[-1] for p in printed] == [
        "class.csv",
        "class.json",
        "reward_curves.png",
        "learned_from.png",
    ]
    rows = list(csv.DictReader(open(tmp_path / "class.csv", encoding="utf-8")))
    by_name = {r["name"]: r for r in rows}
    assert by_name["teacher"]["host"] == "True" and by_name["solo"]["role"] == "baseline"
    assert by_name["ada"]["rounds"] == "8" and by_name["ada"]["reward_last5"] == "0.5"
    assert by_name["bob"]["aha"] == "2" and by_name[HOSTILE]["received_by_host"] == ""
    assert '\'=HYPERLINK("http://x")' in by_name  # a formula no more
    data = json.loads((tmp_path / "class.json").read_text())
    assert data["task"] == "addition" and len(data["members"]) == 7
    assert data["learned_from"][ADA][HOST] == list(board.snapshot().matrix[ADA][HOST])
    for png in ("reward_curves.png", "learned_from.png"):
        image = Image.open(tmp_path / png)
        assert image.format == "PNG" and image.size[0] >= 400
        assert len(image.convert("RGB").getcolors(1 << 20)) > 20


def test_report_on_a_folder_without_a_class_says_which_folder(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds no class.jsonl" in err and "sapo-edge host" in err


def test_a_crowd_of_members_and_a_torn_byte_do_not_stop_the_report(tmp_path, capsys) -> None:
    """Identities are free in the room: 64 rows (the board takes 256) still give plots of a
    bounded size, quickly; a line of bytes that are not UTF-8 is skipped, not fatal."""
    from sapo_edge.classroom.board import ClassBoard

    board = ClassBoard(tmp_path / "class.jsonl")
    for i in range(64):
        board.record(f"{i:032x}", RoundStats(0, 0.5, 1, 1, 0, 0, {}, f"m{i}", "m", "t", "cpu"))
    with open(tmp_path / "class.jsonl", "ab") as f:
        f.write(b'{"at": 1, "sender": "\xff\xfe"}\n')
    assert main(["report", str(tmp_path)]) == 0
    assert len(list(csv.DictReader(open(tmp_path / "class.csv", encoding="utf-8")))) == 64
    for png in ("reward_curves.png", "learned_from.png"):
        assert max(Image.open(tmp_path / png).size) <= 2000


def test_a_class_of_one_round_is_drawn_as_points(tmp_path) -> None:
    """Issue 28: after one round reward_curves.png was blank (a line of one point draws
    nothing; the x axis ran 0.96-1.04). Each round is a marker while there are few."""
    from sapo_edge.classroom.board import ClassBoard
    from sapo_edge.classroom.report import write_report

    board = ClassBoard(tmp_path / "class.jsonl", host_id=HOST)
    board.record(HOST, RoundStats(0, 0.5, 1, 1, 0, 0, {}, "teacher", "m", "torch", "cpu"))
    paths = write_report(tmp_path)
    png = next(p for p in paths if p.name == "reward_curves.png")
    import numpy as np

    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=int)
    blue = np.array([0x1F, 0x77, 0xB4])  # the first member's colour (matplotlib's first)
    near = int((np.abs(pixels - blue).sum(axis=2) < 40).sum())
    assert near > 20, "the one round of the class is not drawn"


def test_a_report_made_again_from_the_folder_keeps_what_the_host_verified(tmp_path) -> None:
    """Issue 48: `sapo-edge report RUN_DIR` after the class rewrote class.csv with
    received_by_host blank for everyone (the live view showed 64-80): the host's counts are kept
    in the folder when it writes the report, and read back; a broken or hostile file is not."""
    from sapo_edge.classroom.report import VERIFIED_FILE, write_report

    recorded_board(tmp_path / "class.jsonl")
    (tmp_path / INFO_FILE).write_text(json.dumps({"host_id": HOST}))
    write_report(tmp_path, {ADA: 64, "x" * 32: 3})  # the host's r or q
    assert main(["report", str(tmp_path)]) == 0  # later, from the folder alone
    rows = {r["node_id"]: r for r in csv.DictReader(open(tmp_path / "class.csv"))}
    assert rows[ADA]["received_by_host"] == "64" and rows[HOST]["received_by_host"] == ""
    for junk in ('{"received_by_host": {"a": -1, "%s": "9"}}' % ("b" * 32), "[", "x" * (2 << 20)):
        (tmp_path / VERIFIED_FILE).write_text(junk)
        assert main(["report", str(tmp_path)]) == 0
        rows = {r["node_id"]: r for r in csv.DictReader(open(tmp_path / "class.csv"))}
        assert rows[ADA]["received_by_host"] == ""


def test_the_class_mean_is_drawn_over_rounds_most_members_have(tmp_path) -> None:
    """Issue 48: the class mean jumped to 0.41 at a round only one member of four had reached
    (its own reward): a round counts once more than half the members have it."""
    from sapo_edge.classroom.board import ClassBoard
    from sapo_edge.classroom.report import write_report

    board = ClassBoard(tmp_path / "class.jsonl", host_id=HOST)
    reached = {HOST: 5, ADA: 3, "c" * 32: 3, "d" * 32: 2}
    for node, rounds in reached.items():
        for r in range(rounds):
            reward = 0.41 if r >= 3 else 0.1
            board.record(node, RoundStats(r, reward, 1, 1, 0, 0, {}, node[:4], "m", "t", "cpu"))
    # round 3: 3 of 4 members; rounds 4 and 5 (0.41): the host alone, not the class's
    assert [r for r, _ in board.snapshot().swarm_mean] == [1, 2, 3]
    write_report(tmp_path)
    data = json.loads((tmp_path / "class.json").read_text())
    assert [r for r, _ in data["class_mean"]] == [1, 2, 3]
    assert max(v for _, v in data["class_mean"]) < 0.11
