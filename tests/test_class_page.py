"""The projector page, served by a real host on loopback: a real headless Chromium renders it
(screenshot and DOM, after its script has drawn the class), members' names stay literal text,
the page is read-only, never holds the room key, shows the join code only to this machine or to
a browser with the host's page token, and refuses names it does not know (DNS rebinding).

Chromium comes from Debian's `chromium` package (.ci/run installs it); without it the
browser test is skipped with a message."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
from class_recorded import CODE, HOSTILE, TASK, recorded_board
from scripted import make_cfg

from sapo_edge.classroom.host import ClassHost, HostOptions
from sapo_edge.swarm.admission import _Code
from sapo_edge.swarm.identity import Identity
from sapo_edge.web.page import host_header_ok, may_see_code

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=6000",
]


@pytest.fixture
def host(tmp_path: Path):
    """A real host (no training) whose board holds the recorded class."""
    cfg = make_cfg(tmp_path / "host", listen="127.0.0.1:0", mdns=False)
    h = ClassHost(
        cfg,
        HostOptions(address="127.0.0.1", relay_host="127.0.0.1", relay_port=0, web="0.0.0.0:0"),
        identity=Identity.generate(),
        log=lambda _m: None,
    )
    h.start()
    recorded = recorded_board()
    h.board.members, h.board.clock = recorded.members, recorded.clock
    h.board.received, h.board.host_id = recorded.received, recorded.host_id
    h.board.seats = recorded.seats  # whom it admitted
    h.task = TASK
    h.code = CODE  # the picture shows a classroom address, not this test's loopback one
    words = CODE.partition("@")[0]  # and CODE admits, as the code on a host's page does
    h.admissions.revoke(h.admissions.new_code())
    h.admissions.codes[words.split("-")[0]] = _Code(words, h.admissions.clock() + 600)
    yield h
    h.close()


def get(url: str, **kw) -> tuple[int, dict, bytes]:
    async def go():
        async with aiohttp.ClientSession() as s, s.get(url, **kw) as r:
            return r.status, dict(r.headers), await r.read()

    return asyncio.run(go())


def test_the_page_is_read_only_keyless_and_shows_the_code_only_where_it_should(host) -> None:
    base = f"http://127.0.0.1:{host.services.web_port}"
    secrets = [
        host.admissions.grant.secret,
        host.transport.keys.lan_id,
        host.transport.keys.relay_id,
    ]
    bodies = b""
    for path in ("/", "/class.js", "/class.css", "/class.json", "/qr.svg"):
        status, headers, body = get(base + path)
        assert status == 200, path
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        bodies += body
    assert not any(s.encode() in bodies for s in secrets)
    assert b"innerHTML" not in bodies and b"eval(" not in bodies
    data = json.loads(get(base + "/class.json")[2])
    assert data["code"] == CODE and data["task"] == TASK  # this machine sees the code
    assert [m["name"] for m in data["members"]][:2] == ["teacher", HOSTILE]

    # read-only: nothing but GET
    async def post() -> int:
        async with aiohttp.ClientSession() as s, s.post(base + "/class.json", data=b"{}") as r:
            return r.status

    assert asyncio.run(post()) == 405
    # a name that is not an address (DNS rebinding): refused before any handler runs
    assert get(base + "/class.json", headers={"Host": "evil.example:80"})[0] == 421
    assert host_header_ok("127.0.0.1:7746") and host_header_ok("[::1]:7746")
    assert host_header_ok("localhost") and not host_header_ok("sapo.example")
    assert may_see_code("127.0.0.1", "", "t") and may_see_code("::1", "", "t")
    assert not may_see_code("192.168.1.50", "", "t") and not may_see_code("192.168.1.50", "x", "t")
    assert may_see_code("192.168.1.50", "t", "t") and not may_see_code("10.0.0.1", "", "")


def test_a_code_that_no_longer_admits_leaves_the_page(host) -> None:
    """Issue 28: the page kept showing a code (and its QR) after it had expired or wrong tries
    had retired it. A code that admits nobody is not shown: the page says the teacher makes a
    new one (n), and the QR is not served; the new code is shown at once."""
    base = f"http://127.0.0.1:{host.services.web_port}"
    assert json.loads(get(base + "/class.json")[2])["code"] == CODE
    clock = host.admissions.clock
    host.admissions.clock = lambda: clock() + 601  # the code's time is up
    assert json.loads(get(base + "/class.json")[2])["code"] == ""
    assert get(base + "/qr.svg")[0] == 503
    host.admissions.clock = clock
    n = CODE.split("-")[0]
    for i in range(10):  # ten typos across the class retire it
        ip = f"10.0.0.{i + 1}"
        host.admissions.end(host.admissions.begin(n, ip), False, ip)
    assert json.loads(get(base + "/class.json")[2])["code"] == ""
    fresh = host.new_code()
    assert json.loads(get(base + "/class.json")[2])["code"] == fresh
    assert get(base + "/qr.svg")[0] == 200


def test_another_machine_sees_the_class_but_not_the_code_without_the_token(host) -> None:
    from sapo_edge.run.doctor import lan_addresses

    lan = [a for a in lan_addresses() if ":" not in a]
    if not lan:
        pytest.skip("this machine has no LAN address to play the other machine from")
    base = f"http://{lan[0]}:{host.services.web_port}"
    data = json.loads(get(base + "/class.json")[2])
    assert data["code"] is None and len(data["members"]) == 6
    assert get(base + "/qr.svg")[0] == 403
    assert json.loads(get(base + f"/class.json?token={host.page_token}")[2])["code"] == CODE
    assert get(base + "/class.json?token=wrong")[0] == 200
    assert json.loads(get(base + "/class.json?token=wrong")[2])["code"] is None


@pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not installed (apt-get install chromium): no screenshot"
)
def test_chromium_renders_the_class_and_names_stay_text(host, tmp_path) -> None:
    """And (issue 48) two members whose names differ only in their suffix stay told apart in
    the learned-from table; one not heard for minutes reads 'asleep?', one that left 'left'."""
    from sapo_edge.swarm.identity import name_for_id
    from sapo_edge.swarm.progress import Progress
    from sapo_edge.swarm.stats import RoundStats

    seen: dict[str, str] = {}  # two ids whose own names differ only in the id part
    for i in range(1, 100_000):
        node = f"{i:x}".rjust(4, "0") + "0" * 28
        prefix = name_for_id(node).rsplit("-", 1)[0]
        if prefix in seen:
            break
        seen[prefix] = node
    badgers = {seen[prefix]: name_for_id(seen[prefix]), node: name_for_id(node)}
    tagger = "e" * 32  # the Aha lesson: its tags, strict reward, hint and first right answer
    for member in [*badgers, tagger]:  # admitted with the code: the host vouches for them
        assert host.board.admit(member, "127.0.0.1") == ""
    for me, name in badgers.items():
        other = next(k for k in badgers if k != me)
        host.board.record(
            me, RoundStats(0, 0.25, 2, 1, 1, 0, {other: (1, 1)}, name, "m", "torch", "cpu")
        )
    host.board.record_progress("f" * 32, Progress("stopped", 3, 8, name="gone"))
    host.board.hinted = lambda node_id: node_id == tagger
    tags = RoundStats(
        0, 0.5, 2, 1, 0, 0, {}, "tagger", "m", "torch", "cpu", tagged=0.75, strict=0.5
    )
    host.board.record(tagger, tags)
    url = f"http://127.0.0.1:{host.services.web_port}/"
    profile = tmp_path / "chromium-profile"
    shot = tmp_path / "page.png"
    common = [CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={profile}"]
    subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1280,1100", url],
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert shot.is_file(), "Chromium wrote no screenshot"
    dom = subprocess.run(
        [*common, "--dump-dom", url], capture_output=True, text=True, timeout=90, check=False
    ).stdout
    assert f'sapo-edge join <span id="code">{CODE}</span>' in dom  # drawn by the script
    for name in ("teacher", "ada", "bob", "solo"):  # (host), (solo baseline): class.css's
        assert f"<td>{name}</td>" in dom
    assert "&lt;img src=x onerror=alert(1)&gt;[b]x" in dom  # text, not an element
    assert "<td>tagger (hint)</td>" in dom and '<td class="num">75%</td>' in dom
    assert "<li>tagger: right in tags from round 1 (it has the hint)</li>" in dom
    assert '<img src="x"' not in dom and 'onerror="' not in dom
    assert dom.count("<polyline") >= 7  # 5 members + class mean + baseline (+ sparklines)
    assert "class mean" in dom and "solo baseline" in dom
    for name in badgers.values():  # 'swift-bad…6aea' / 'swift-bad…f3ab', not 'swift-bad…' twice
        head, tail = name[:9], name.rsplit("-", 1)[1]
        assert f">{head}…{tail}</th>" in dom if len(name) > 14 else f">{name}</th>" in dom
    assert "<td>asleep? not heard for 2m (was: round 3 done)</td>" in dom  # the hostile one
    assert "<td>left</td>" in dom

    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 1100)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # drawn, not a blank page


def test_polling_the_page_hard_takes_the_class_at_most_once_a_second() -> None:
    """Anyone who reaches the page may poll /class.json as fast as they like: the board is read
    once for all of them (off the loop the relay shares), never once per request."""
    from aiohttp.test_utils import TestClient, TestServer

    from sapo_edge.web.page import make_app

    taken: list[float] = []

    def class_json() -> dict:
        taken.append(1.0)
        return {"members": [], "task": "t"}

    async def go() -> list[dict]:
        app = make_app(class_json, lambda: "1-acorn-acorn@127.0.0.1:1", "tok", lambda c: "")
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:

            async def one(query: str) -> dict:
                r = await client.get("/class.json" + query)
                assert r.status == 200
                return json.loads(await r.text())

            return await asyncio.gather(*(one("?token=tok" if i % 2 else "") for i in range(60)))

    answers = asyncio.run(go())
    assert len(taken) == 1
    assert all(a["members"] == [] and a["task"] == "t" for a in answers)
    assert {a["code"] for a in answers} == {"1-acorn-acorn@127.0.0.1:1"}  # loopback sees it


def test_a_page_asked_before_the_class_is_ready_says_so(capsys) -> None:
    """The page is up a moment before the board and the first code exist: a browser asking then
    gets 503 'starting', never a 500 with a traceback on the teacher's terminal."""
    from aiohttp.test_utils import TestClient, TestServer

    from sapo_edge.web.page import make_app

    def not_yet() -> dict:
        raise AssertionError("no board yet")

    async def go() -> list[int]:
        app = make_app(not_yet, lambda: "", "tok", lambda c: c[10])
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            return [(await client.get(p)).status for p in ("/class.json", "/qr.svg")]

    assert asyncio.run(go()) == [503, 503]
    assert "Traceback" not in capsys.readouterr().err
