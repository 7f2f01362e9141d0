"""What travels with the join code and what a student types: the class's settings are read
strictly (a host cannot set a student's network, secret or a path on its disk), checked like
any config, and fit the admission's sealed welcome; join codes parse with typo hints."""

from __future__ import annotations

import json
import threading

import pytest
from swarm_util import fake_paths

from sapo_edge.classroom.code import CodeError, big_text, format_code, parse_code, qr_lines
from sapo_edge.classroom.settings import (
    CLASS_FIELDS,
    LOCAL_FIELDS,
    MAX_EXTRA_CHARS,
    class_config,
    fit_here,
    make_invite,
    read_invite,
)
from sapo_edge.config.settings import Config, ConfigError
from sapo_edge.swarm import admission


def invite_text(**over) -> str:
    cfg = Config.load("", {"preset": "addition", "model": "smollm2-135m"})
    base = json.loads(make_invite(cfg, 7744, 7745, "t").to_text())
    base.update(over)
    return json.dumps(base)


def test_the_class_sets_the_task_and_each_laptop_keeps_its_own() -> None:
    assert MAX_EXTRA_CHARS == admission.MAX_EXTRA_CHARS
    assert {"room", "secret", "secret_file", "relay", "peer", "listen", "out_dir"}.isdisjoint(
        CLASS_FIELDS
    )
    assert {"domains", "domain_configs", "group_size", "local_samples", "max_new_tokens"} <= (
        CLASS_FIELDS
    )
    assert CLASS_FIELDS & LOCAL_FIELDS == {"rounds"}  # the class's, unless the laptop says
    seven = read_invite(
        invite_text(settings={**json.loads(invite_text())["settings"], "rounds": 7})
    )
    assert class_config(seven, {}).rounds == 7 and class_config(seven, {"rounds": 3}).rounds == 3
    paper = make_invite(Config.load("", {"preset": "paper"}), 7744, 7745, "teacher").to_text()
    assert len(paper) < MAX_EXTRA_CHARS // 4  # the paper's 9 domains fit with room to spare
    invite = read_invite(invite_text())
    cfg = class_config(invite, {"model": "tiny/model", "rounds": 3, "group_size": 99})
    assert cfg.model == "tiny/model" and cfg.rounds == 3
    assert cfg.group_size == 4  # the class's, not the laptop's: group_size is not local
    assert cfg.domain_configs["basic_arithmetic"]["max_digits"] == 1


@pytest.mark.parametrize(
    "text, what",
    [
        ("{", "not valid JSON"),
        (invite_text(v=2), "version 2"),
        (invite_text(extra=1), "cannot read"),
        (invite_text(node_port="7744"), "port"),
        (invite_text(relay_port=70000), "port"),
        (invite_text(settings={"relay": "ws://evil:1"}), "may not"),
        (invite_text(settings={"peer": ["evil:1"]}), "may not"),
        (invite_text(settings={"secret": "x"}), "may not"),
        (invite_text(settings={"listen": "0.0.0.0:1"}), "may not"),
        (invite_text(settings=[]), "not a table"),
    ],
)
def test_a_hosts_settings_are_read_strictly(text: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what):
        read_invite(text)


@pytest.mark.parametrize(
    "model",
    [
        "/etc/passwd",
        "../../secret",
        "~/models/x",
        "a/b/c",
        "C:\\x",
        "",
        "x" * 300,
        "x.gguf",
        "x/y.gguf",
    ],
)
def test_a_class_cannot_point_a_laptop_at_a_path_on_its_disk(model: str) -> None:
    settings = json.loads(invite_text())["settings"]
    invite = read_invite(invite_text(settings={**settings, "model": model}))
    with pytest.raises(ConfigError, match="--model"):
        class_config(invite, {})
    assert class_config(invite, {"model": "smollm2-135m"}).model == "smollm2-135m"


def test_a_class_model_resolves_on_the_hub_never_as_a_folder_on_this_disk(
    tmp_path, monkeypatch
) -> None:
    """A class's 'org/name' looks like a hub id, but resolve_model tried a relative folder
    first: a class could make a student load (and report on) a folder on its own disk. Now a
    class's model is a hub id or alias only; the student's own --model may still be a path."""
    from sapo_edge.models.resolve import ModelNotFound, resolve_model

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing is fetched here: the refusal says so
    folder = tmp_path / "Documents" / "private-model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"num_hidden_layers": 1, "hidden_size": 8, "vocab_size": 16})
    )
    settings = json.loads(invite_text())["settings"]
    invite = read_invite(invite_text(settings={**settings, "model": "Documents/private-model"}))
    cfg = class_config(invite, {})
    with pytest.raises(ModelNotFound) as e:
        resolve_model(cfg.model, progress=lambda _m: None)
    assert "Documents/private-model" in str(e.value) and "HF_HUB_OFFLINE" in str(e.value)
    assert fit_here(cfg, "cpu")[0] == "unknown"  # its config.json was not read either
    own = class_config(invite, {"model": "Documents/private-model"})  # the student's own flag
    assert resolve_model(own.model, progress=lambda _m: None).source == "local"


def test_bad_class_values_fail_like_any_config_and_name_the_class() -> None:
    settings = json.loads(invite_text())["settings"]
    invite = read_invite(invite_text(settings={**settings, "group_size": 1}))
    with pytest.raises(ConfigError, match="group_size"):
        class_config(invite, {})
    hostile = read_invite(invite_text(settings={**settings, "lenient": "\x1b]0;x\x07" * 900}))
    with pytest.raises(ConfigError) as e:
        class_config(hostile, {})
    assert "\x1b" not in str(e.value) and len(str(e.value)) < 400


def test_join_codes_parse_with_hints() -> None:
    code = parse_code("  7 Acorn ZINNIA@192.168.1.20:7745 ")
    assert (code.words, code.host, code.port) == ("7-acorn-zinnia", "192.168.1.20", 7745)
    assert parse_code("7-acorn-zinnia@[fe80::1]:9").host == "[fe80::1]"
    assert parse_code("7-acorn-zinnia@laptop.lan").port == 7745
    assert format_code("7-acorn-zinnia", "::1", 7745) == "7-acorn-zinnia@[::1]:7745"
    for bad, hint in [
        ("7-acorn-zinia@h:1", "did you mean 'zinnia'"),
        ("7-acorn-zinnia", "no host address"),
        ("acorn-zinnia@h:1", "a number and two words"),
        ("7-acorn-zinnia@h:0", "not a port"),
        ("7-acorn-zinnia@h h:1", "not an address"),
        ("7-acorn-zinnia@[192.168.1.20:7745]:7745", "not an address"),  # --address with a port
    ]:
        with pytest.raises(CodeError, match=hint):
            parse_code(bad)


def test_large_letters_and_the_qr_code_are_rectangular_blocks() -> None:
    big = big_text("7-acorn-zinnia")
    assert len(big) == 3 and len({len(line) for line in big}) == 1
    assert set("".join(big)) <= set("█▀▄ ")
    qr = qr_lines("7-acorn-zinnia@192.168.1.20:7745")
    assert len({len(line) for line in qr}) == 1 and len(qr) * 2 >= len(qr[0])


def test_a_student_whose_clock_is_off_is_told_so() -> None:
    """Batches and stats sent over 5 minutes from the receiver's clock are refused (replay
    protection): a laptop with a wrong clock is refused both ways with every path up. Its
    watcher says what to fix instead of showing 'in the class' while nothing gets through."""
    import time
    from collections import Counter
    from types import SimpleNamespace

    from sapo_edge.classroom.join_status import CLOCK_REMEDY, PathWatcher

    counters = Counter()
    transport = SimpleNamespace(
        port=1,
        closed=False,
        mdns=False,
        counters=counters,
        connected=lambda: ["relay:ws://h:1"],
        peers=lambda: [],
        paths=lambda: fake_paths(["relay:ws://h:1"]),
    )
    code = parse_code("7-acorn-zinnia@192.168.1.20:7745")
    joined = SimpleNamespace(
        transport=transport,
        code=code,
        relay="ws://h:1",
        host_address="h:1",
        class_ended=threading.Event(),
        removed=threading.Event(),
    )
    said, warned = [], []
    watcher = PathWatcher(joined, said.append, lambda t, r: warned.append((t, r)), every=0.02)
    watcher.start()
    try:
        counters["rejected:expired"] += 2
        counters["rejected:stats_expired"] += 1
        deadline = time.monotonic() + 5
        while not warned and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watcher.stop()
    assert warned == [("This laptop's clock looks wrong", CLOCK_REMEDY)]
    counters["delivered"] += 1  # something gets through: old replays, not this laptop's clock
    from sapo_edge.classroom.join_status import expired_count

    assert expired_count(transport) == 0


def test_a_warning_about_the_path_clears_once_a_path_works_again() -> None:
    """Issue 28: after a laptop slept and rejoined, 'Cannot reach the class' stayed on screen
    until quit, under a header saying it was in the class. The watcher says when it no longer
    holds, and the dashboard's banner goes (a fatal error, or another warning, stays)."""
    import asyncio
    from collections import Counter
    from types import SimpleNamespace

    from sapo_edge.classroom.join_status import NO_PATH_TITLE, PathWatcher
    from sapo_edge.config.settings import Config
    from sapo_edge.tui.app import SapoDashboard
    from sapo_edge.tui.messages import Problem, ProblemCleared
    from sapo_edge.tui.widgets.problem import ProblemBanner

    links: list[str] = []
    transport = SimpleNamespace(
        port=1,
        closed=False,
        mdns=False,
        counters=Counter(),
        connected=lambda: list(links),
        peers=lambda: [],
        paths=lambda: fake_paths(links),
    )
    code = parse_code("7-acorn-zinnia@192.168.1.20:7745")
    joined = SimpleNamespace(
        transport=transport,
        code=code,
        relay="ws://h:1",
        host_address="h:1",
        invite=SimpleNamespace(node_port=7744, relay_port=7745),
        class_ended=threading.Event(),
        removed=threading.Event(),
    )
    warned, cleared = threading.Event(), threading.Event()
    events = []
    watcher = PathWatcher(
        joined,
        lambda _t: None,
        lambda t, _r: (events.append(("warn", t)), warned.set()),
        clear=lambda t: (events.append(("clear", t)), cleared.set()),
        every=0.02,
        no_path_after=0.1,
    )
    paths: list[str] = []
    watcher.on_path = paths.append  # the dashboard's header hears it as a typed event
    watcher.start()
    try:
        assert warned.wait(5)
        links.append("relay:ws://h:1")  # the laptop woke up and rejoined
        assert cleared.wait(5)
    finally:
        watcher.stop()
    assert events == [("warn", NO_PATH_TITLE), ("clear", NO_PATH_TITLE)]
    assert "relay" in paths[-1] and len(paths) >= 2  # the lost path, then the relay's

    app = SapoDashboard(Config(), start=False)

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            banner = app.query_one(ProblemBanner)
            app.post_message(Problem(NO_PATH_TITLE, "check the Wi-Fi", fatal=False))
            await pilot.pause()
            assert banner.display
            app.post_message(ProblemCleared("This laptop's clock looks wrong"))  # another one
            await pilot.pause()
            assert banner.display
            app.post_message(ProblemCleared(NO_PATH_TITLE))
            await pilot.pause()
            assert not banner.display
            app.post_message(Problem(NO_PATH_TITLE, "it ended", fatal=True))
            app.post_message(ProblemCleared(NO_PATH_TITLE))
            await pilot.pause()
            assert banner.display  # a fatal error is never cleared

    asyncio.run(drive())


def test_once_the_class_has_ended_nothing_warns_that_it_cannot_be_reached() -> None:
    """Issue 28: a student's dashboard stays in the class after its rounds (to hear the end);
    once the host has ended the class, its paths going away is no reason for a warning."""
    import time
    from collections import Counter
    from types import SimpleNamespace

    from sapo_edge.classroom.join_status import PathWatcher

    looks = []
    transport = SimpleNamespace(
        port=1,
        closed=False,
        mdns=False,
        counters=Counter(),
        connected=lambda: [],
        peers=lambda: [],
        paths=lambda: looks.append(1) or fake_paths([]),
    )
    joined = SimpleNamespace(
        transport=transport,
        code=parse_code("7-acorn-zinnia@192.168.1.20:7745"),
        relay="ws://h:1",
        host_address="h:1",
        invite=SimpleNamespace(node_port=7744, relay_port=7745),
        class_ended=threading.Event(),
        removed=threading.Event(),
    )
    joined.class_ended.set()
    warned, said = [], []
    watcher = PathWatcher(
        joined, said.append, lambda t, _r: warned.append(t), every=0.01, no_path_after=0.0
    ).start()
    try:
        deadline = time.monotonic() + 20
        while len(looks) < 30 and time.monotonic() < deadline:  # 30 looks, none warned
            time.sleep(0.01)
    finally:
        watcher.stop()
    assert len(looks) >= 30 and warned == []
    assert said == ["class: the class has ended (the teacher's q)"]  # not "trying the LAN"


def test_a_watcher_says_nothing_once_the_run_has_left_the_class_network() -> None:
    """A headless student's run closes its network when its rounds are done; the watcher used to
    tick on and print 'not in the class yet: trying ...' just before the run's summary. It ends
    once the transport is closed."""
    import time
    from collections import Counter
    from types import SimpleNamespace

    from sapo_edge.classroom.join_status import PathWatcher

    links = ["relay:ws://h:1"]
    transport = SimpleNamespace(
        port=1,
        closed=False,
        mdns=False,
        counters=Counter(),
        connected=lambda: list(links),
        peers=lambda: [],
        paths=lambda: fake_paths(links),
    )
    code = parse_code("7-acorn-zinnia@192.168.1.20:7745")
    joined = SimpleNamespace(
        transport=transport,
        code=code,
        relay="ws://h:1",
        host_address="h:1",
        class_ended=threading.Event(),
        removed=threading.Event(),
    )
    said: list[str] = []
    watcher = PathWatcher(joined, said.append, lambda _t, _r: None, every=0.02).start()
    try:
        deadline = time.monotonic() + 5
        while not said and time.monotonic() < deadline:
            time.sleep(0.02)
        assert said == ["class: in the class via the host's relay (0 members heard)"]
        transport.closed = True
        links.clear()  # what a closed network shows
        watcher._thread.join(5)
        assert not watcher._thread.is_alive()
        assert said == ["class: in the class via the host's relay (0 members heard)"]
    finally:
        watcher.stop()
