"""The dashboard driven by Pilot: the real app training the tiny random Qwen2 in its worker thread.

Synchronisation is on the app's own state (worker completion, the loop's `parked` event), never
on sleeps.
"""

import asyncio
import json
import sys
from pathlib import Path

import pytest

from sapo_edge.config.settings import Config
from sapo_edge.run.control import RunControl
from sapo_edge.tui.app import SapoDashboard
from sapo_edge.tui.bridge import TuiCallback
from sapo_edge.tui.messages import (
    LogLine,
    NothingTrained,
    Notice,
    PhaseProgress,
    PhaseStarted,
    RoundDone,
)
from sapo_edge.tui.widgets.header import NodeHeader
from sapo_edge.tui.widgets.idle_round import IdleRound
from sapo_edge.tui.widgets.problem import ProblemBanner
from sapo_edge.tui.widgets.reward_chart import RewardChart
from sapo_edge.tui.widgets.rollouts import RolloutFeed
from sapo_edge.tui.widgets.tables import DomainTable, PeersTable

sys.path.insert(0, str(Path(__file__).parent))
from tui_recorded import node_started, recorded_messages  # noqa: E402

BOUND = 120  # seconds any one wait may take: a hung dashboard fails the test instead of CI

pytestmark = pytest.mark.slow


def tiny_cfg(model, out, **kw) -> Config:
    base = dict(
        model=str(model),
        domains={"basic_arithmetic": 1.0},
        questions_per_round=2,
        group_size=2,
        max_new_tokens=6,
        local_samples=1,
        external_samples=1,
        lenient=True,
        rounds=2,
        checkpoint_every=0,
        out_dir=str(out),
        solo=True,  # the dashboard on its own; the network has its own tests
    )
    base.update(kw)
    return Config(**base)


def _metrics(out: Path) -> list[dict]:
    path = out / "node" / "metrics.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def test_rounds_advance_and_every_panel_updates(tiny_qwen, tmp_path):
    app = SapoDashboard(tiny_cfg(tiny_qwen, tmp_path))

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            await asyncio.wait_for(app.workers.wait_for_complete(), BOUND)
            await pilot.pause()
            assert app.outcome == "done" and app.rounds_done == 2
            assert app.query_one(RewardChart).rounds == [1, 2]  # shown 1-based
            assert app.query_one(DomainTable).row_count == 1
            assert app.query_one(RolloutFeed).row_count == 4  # 2 own questions x 2 rounds
            assert app.query_one(PeersTable).row_count == 1  # "none yet": solo
            header = app.query_one(NodeHeader)
            assert header.info.model == Path(tiny_qwen).name and header.info.lora_parameters > 0
            assert header.state == "done"

    asyncio.run(drive())
    assert [m["round"] for m in _metrics(tmp_path)] == [0, 1]
    assert (tmp_path / "node" / "checkpoints" / "round-000002" / "COMPLETE").exists()


def test_pause_holds_rounds_and_quit_stops_and_saves(tiny_qwen, tmp_path):
    class Watched(SapoDashboard):
        def on_round_done(self, m) -> None:  # Textual calls the base class's handler too
            self.first_round.set()

    control = RunControl()
    app = Watched(tiny_cfg(tiny_qwen, tmp_path, rounds=50), control=control)

    async def drive():
        app.first_round = asyncio.Event()
        async with app.run_test(size=(120, 40)) as pilot:
            await asyncio.wait_for(app.first_round.wait(), BOUND)  # it trains...
            await pilot.press("p")  # ...until paused
            assert await asyncio.to_thread(control.parked.wait, BOUND)
            await pilot.pause()
            done = app.rounds_done
            assert app.query_one(NodeHeader).state == "paused"
            assert 1 <= len(_metrics(tmp_path)) == done < 50  # no round runs while paused
            await pilot.press("q")
            await asyncio.wait_for(app.workers.wait_for_complete(), BOUND)
            await pilot.pause()
            return done

    done = asyncio.run(drive())
    assert app.return_value == "stopped"
    assert len(_metrics(tmp_path)) == done  # quitting from pause ran nothing more
    assert (tmp_path / "node" / "checkpoints" / f"round-{done:06d}" / "COMPLETE").exists()


def test_s_saves_a_checkpoint_at_once_and_p_again_resumes(tiny_qwen, tmp_path):
    """The README's keys: `s` saves a checkpoint now (here while paused, with periodic
    checkpoints off, so only the key can have written it), and a second `p` resumes training."""

    class Watched(SapoDashboard):
        def on_round_done(self, m) -> None:
            super().on_round_done(m)  # rounds_done counts it before the event says so
            m.prevent_default()
            self.round_event.set()

    control = RunControl()
    app = Watched(tiny_cfg(tiny_qwen, tmp_path, rounds=50), control=control)
    ckpts = tmp_path / "node" / "checkpoints"

    async def a_round_after(n: int) -> None:
        """Until a round after the n-th is done: one that ended while `p` was still being
        pressed counts too (clearing the event after the press lost it, and the wait then
        needed one more round, which never came once the tiny run had done all of them)."""
        while app.rounds_done <= n:
            app.round_event.clear()
            await asyncio.wait_for(app.round_event.wait(), BOUND)

    async def drive():
        app.round_event = asyncio.Event()
        async with app.run_test(size=(120, 40)) as pilot:
            await asyncio.wait_for(app.round_event.wait(), BOUND)
            await pilot.press("p")
            assert await asyncio.to_thread(control.parked.wait, BOUND)
            await pilot.pause()
            done = app.rounds_done
            assert not ckpts.exists() or not any(ckpts.iterdir())  # checkpoint_every=0
            await pilot.press("s")
            saved = ckpts / f"round-{done:06d}" / "COMPLETE"
            for _ in range(int(BOUND / 0.05)):  # the loop saves between rounds, still paused
                if saved.exists():
                    break
                await asyncio.sleep(0.05)
            assert saved.exists()
            assert control.paused and app.rounds_done == done == len(_metrics(tmp_path))
            await pilot.press("p")  # resume
            await a_round_after(done)
            assert not control.paused and app.query_one(NodeHeader).state != "paused"
            assert app.rounds_done > done  # training goes on (tiny rounds: maybe several)
            await pilot.press("q")
            await asyncio.wait_for(app.workers.wait_for_complete(), BOUND)
            await pilot.pause()
            return done

    done = asyncio.run(drive())
    assert app.return_value == "stopped"
    assert len(_metrics(tmp_path)) >= done + 1


def test_a_missing_model_shows_its_remedy_not_a_traceback(tmp_path):
    app = SapoDashboard(tiny_cfg(tmp_path / "no-such-model", tmp_path))

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            await asyncio.wait_for(app.workers.wait_for_complete(), BOUND)
            await pilot.pause()
            banner = app.query_one(ProblemBanner)
            assert banner.display and banner.problem.fatal
            text = str(banner.render())
            assert "Model not found" in text and "Hugging Face id" in text
            assert "Traceback" not in text
            assert app.outcome == "failed" and app.query_one(NodeHeader).state == "stopped"
            await pilot.press("q")  # nothing runs any more: quits at once
            await pilot.pause()

    asyncio.run(drive())
    assert app.return_value == "failed"


def _fed_app() -> SapoDashboard:
    class Fed(SapoDashboard):
        def on_mount(self) -> None:  # runs after SapoDashboard.on_mount (Textual calls both)
            for m in recorded_messages():
                self.post_message(m)

    return Fed(Config(), start=False)


def test_help_and_settings_screens(tmp_path):
    app = _fed_app()

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("question_mark")
            assert type(app.screen).__name__ == "HelpScreen"
            await pilot.press("escape")
            assert type(app.screen).__name__ == "Screen"
            await pilot.press("c")
            assert type(app.screen).__name__ == "SettingsScreen"
            # room and relay cannot change while running: shown, with how to change them
            assert not app.screen.query("#room") and not app.screen.query("#relay")
            network = str(app.screen.query_one("#settings-network").render())
            assert "room: default" in network and "relay: none" in network
            assert "--relay ws://HOST:7745" in network and "--room NAME" in network
            j = app.screen.query_one("#external_samples")
            j.value = "0"
            await pilot.click("#apply")
            await pilot.pause()
            assert type(app.screen).__name__ == "Screen"
            assert app.control.pending_settings() == {"external_samples": 0}
            await pilot.press("c")
            app.screen.query_one("#local_samples").value = "x"
            await pilot.click("#apply")
            await pilot.pause()
            assert "whole number" in str(app.screen.query_one("#settings-error").render())
            await pilot.press("escape")
            await pilot.press("l")
            assert app.query_one("#log").display

    asyncio.run(drive())


def test_a_narrow_terminal_gets_a_sparkline():
    app = _fed_app()

    async def drive():
        async with app.run_test(size=(60, 40)) as pilot:
            await pilot.pause()
            chart = app.query_one(RewardChart)
            assert chart.query_one("#spark").display and not chart.query_one("#plot").display
            assert "reward 0.50" in str(chart.query_one("#spark-label").render())

    asyncio.run(drive())


def test_first_run_shows_what_loading_the_model_is_doing():
    app = SapoDashboard(Config(), start=False)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            app.post_message(
                LogLine("converting model.gguf to safetensors (once; about a minute)...")
            )
            await pilot.pause()
            phase = app.query_one("#phase")
            assert "converting model.gguf" in str(phase.render())
            print("model.safetensors:  40%|####      | 100M/250M", end="\r")  # a hub download bar
            await pilot.pause()
            assert "40%" in str(phase.render())
            assert app.query_one("#round-bar").total is None  # indeterminate until the first round
            long = (
                f"converting SmolLM2.gguf to safetensors in /{'x' * 200}/m (once; about a minute)"
            )
            app.post_message(LogLine(long))  # issue 57: it showed "starting · nverting SmolLM2..."
            await pilot.pause()
            shown = str(phase.render())
            assert "starting · converting SmolLM2.gguf" in shown and "about a minute" in shown

    asyncio.run(drive())


class MidGeneration(SapoDashboard):
    """Tells the test when generation of the first round is under way (a few decode steps in)."""

    def on_phase_progress(self, m) -> None:  # Textual calls the base class's handler too
        self.progress.append(m)
        if m.phase == "generating" and m.done >= 2:
            self.generating.set()

    def exit(self, *args, **kw) -> None:
        self.trained_out_at_exit = self.training_done.is_set()
        self.left.set()
        super().exit(*args, **kw)


@pytest.mark.parametrize("key", ["q", "ctrl+q", "ctrl+c"])
def test_quit_keys_stop_mid_generation_and_exit_only_when_stopped(tiny_qwen, tmp_path, key):
    # a token budget the random model would take minutes to fill: only the stop ends the round
    app = MidGeneration(tiny_cfg(tiny_qwen, tmp_path, max_new_tokens=1800, rounds=3))

    async def drive():
        app.progress, app.generating, app.left = [], asyncio.Event(), asyncio.Event()
        async with app.run_test(size=(120, 40)) as pilot:
            await asyncio.wait_for(app.generating.wait(), BOUND)
            await pilot.press(key)
            await asyncio.wait_for(app.left.wait(), BOUND)

    asyncio.run(drive())
    # the app left only once the training thread had stopped and saved (ctrl+q used to leave
    # at once, with the thread running on behind a blank screen)
    assert app.trained_out_at_exit and app.return_value == "stopped"
    assert app.control.outcome == "stopped"
    steps = [p.done for p in app.progress if p.phase == "generating"]
    assert steps and max(steps) < 1800  # abandoned mid-generation
    assert _metrics(tmp_path) == []  # nothing of the abandoned round is kept
    assert not (tmp_path / "node" / "checkpoints").exists()  # no round finished: nothing to save


def test_a_stop_signal_stops_like_q(tiny_qwen, tmp_path):
    app = MidGeneration(tiny_cfg(tiny_qwen, tmp_path, max_new_tokens=1800, rounds=3))
    forced = []
    app.on_stuck = lambda: forced.append(True)

    async def drive():
        app.progress, app.generating, app.left = [], asyncio.Event(), asyncio.Event()
        async with app.run_test(size=(120, 40)):
            await asyncio.wait_for(app.generating.wait(), BOUND)
            app.stop_from_signal("SIGTERM")
            await asyncio.wait_for(app.left.wait(), BOUND)

    asyncio.run(drive())
    assert app.trained_out_at_exit and app.return_value == "stopped"
    assert app.signals == ["SIGTERM"] and not app.forced and not forced
    assert _metrics(tmp_path) == []


def test_progress_shows_tokens_speed_and_an_eta_before_the_first_round_ends():
    app = SapoDashboard(Config(rounds=10), start=False)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            progress = app.query_one("#progress")
            progress.clock = lambda: 112.0
            started = node_started()
            app.post_message(started)
            await pilot.pause()
            header = str(app.query_one(NodeHeader).render())
            assert header.startswith("swift-otter-3f2a · default") and started.node_id not in header
            app.post_message(PhaseStarted(0, "generating", 100.0, 100.0, None))
            await pilot.pause()
            assert "measuring decode speed" in str(progress.query_one("#eta").render())
            for step in (1, 2, 3, 4):  # 64 completions, 2 s per decode step, none ended yet
                app.post_message(
                    PhaseProgress(0, "generating", step, 256, 64 * step, 64, 0, 104.0 + 2 * step)
                )
            await pilot.pause()
            phase = str(progress.query_one("#phase").render())
            work = str(progress.query_one("#work").render())
            eta = str(progress.query_one("#eta").render())
            assert "round 1 of 10" in phase and "generating" in phase  # rounds count from 1
            assert "256/16,384 tokens · 21 tok/s" in work and "step 4/256 · 0/64 ended" in work
            # 252 steps x 2 s left, then the first round's training guess; then 9 more rounds
            assert eta.startswith("round ~13m") and "all ~2h" in eta

    asyncio.run(drive())


def test_a_round_that_trains_nothing_shows_why_until_one_trains():
    app = SapoDashboard(Config(), start=False)

    def done(round_, local_used):
        return RoundDone(round_, 0.0, None, {}, 10, 1.0, 2.0, 0.0, 1.0, local_used, 0, 0, 0)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            idle = app.query_one(IdleRound)
            assert not idle.display
            for r in (0, 1):
                app.post_message(done(r, 0))
                app.post_message(NothingTrained(r, "all 8 groups scored alike (reward 0)", "--x"))
            await pilot.pause()
            text = str(idle.render())
            assert idle.display and text.startswith("rounds 1-2 trained nothing: all 8 groups")
            assert "what to change: --x" in text
            app.post_message(done(2, 3))
            await pilot.pause()
            assert not idle.display

    asyncio.run(drive())


def test_an_adaptive_node_shows_the_j_it_chose():
    from sapo_edge.tui.widgets.round_progress import RoundProgress

    app = SapoDashboard(Config(mix="adaptive"), start=False)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            app.post_message(RoundDone(0, 0.2, None, {}, 10, 1.0, 2.0, 0.0, 1.0, 4, 3, 5, 2, 4))
            await pilot.pause()
            speed = str(app.query_one(RoundProgress).query_one("#speed").render())
            assert "trained 4 own + 3 peer groups (adaptive: J=4)" in speed

    asyncio.run(drive())


def test_a_finished_run_hides_the_last_phase_progress_bar():
    """Seen in tmux: 'done after 3 rounds' sat above the training bar stuck at 50%."""
    from textual.widgets import ProgressBar

    from sapo_edge.tui.messages import RunEnded
    from sapo_edge.tui.widgets.round_progress import RoundProgress

    app = SapoDashboard(Config(), start=False)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            app.post_message(PhaseStarted(0, "training", 100.0, 90.0, None))
            app.post_message(PhaseProgress(0, "training", 1, 2, 0, 0, 0, 101.0))
            await pilot.pause()
            bar = app.query_one(RoundProgress).query_one(ProgressBar)
            assert bar.display and bar.percentage == 0.5
            app.post_message(RunEnded("done"))
            await pilot.pause()
            assert not bar.display
            assert "done after" in str(app.query_one(RoundProgress).query_one("#phase").render())

    asyncio.run(drive())


def test_a_resumed_run_s_chart_starts_from_its_earlier_rounds(tmp_path):
    """Issue 28: after a resume the dashboard's reward chart started empty. The rounds before
    the resume come from metrics.jsonl (a torn line skipped), then the new ones follow."""
    import dataclasses

    from sapo_edge.tui.bridge import reward_history
    from sapo_edge.tui.messages import NodeStarted
    from sapo_edge.tui.widgets.reward_chart import RewardChart

    metrics = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"round": r, "reward_mean": 0.1 * r}) for r in range(3)]
    metrics.write_text("\n".join([*lines, '{"round": 3, "rew']) + "\n")
    history = reward_history(metrics, before=3)
    assert history == [(0, 0.0), (1, 0.1), (2, 0.1 * 2)]
    app = SapoDashboard(Config(), start=False)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            fields = {f.name: 0 for f in dataclasses.fields(NodeStarted)}
            fields.update(name="n", node_id="0" * 32, room="", transport="", backend="torch")
            fields.update(device="cpu", dtype="float32", model="m", history=history)
            app.post_message(NodeStarted(**fields))
            app.post_message(RoundDone(3, 0.4, None, {}, 10, 1.0, 2.0, 0.0, 1.0, 1, 0, 0, 0))
            await pilot.pause()
            chart = app.query_one(RewardChart)
            assert chart.rounds == [1, 2, 3, 4] and chart.rewards[-1] == 0.4

    asyncio.run(drive())


def test_a_notice_pops_up_and_a_log_line_never_does_whatever_its_words(tmp_path):
    """Issue 46: the dashboard no longer reads the log's wording. A log line that starts like a
    save ("checkpoint saved: ...") stays in the log; a Notice (RunEvents.on_notice, sent by
    the loop, the runner and the join) pops up whatever it says."""
    app = SapoDashboard(Config(), start=False)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            app.post_message(LogLine("checkpoint saved: /runs/a/round-000003"))
            app.post_message(LogLine("room 'lab' is open: anyone who knows its name can join"))
            await pilot.pause()
            assert [str(n.message) for n in app._notifications] == []
            app.post_message(Notice("the class's model differs: rollouts are text"))
            await pilot.pause()
            said = [str(n.message) for n in app._notifications]
            assert said == ["the class's model differs: rollouts are text"]

    asyncio.run(drive())


def test_the_bridge_turns_on_notice_into_a_notice(tmp_path):
    posted = []
    TuiCallback(posted.append).on_notice("anna", "checkpoint saved: /x")
    assert [(type(m).__name__, m.text) for m in posted] == [("Notice", "checkpoint saved: /x")]


def test_an_unexpected_error_keeps_its_traceback_in_a_file_the_exit_summary_names(tmp_path, capsys):
    """The dashboard says the traceback is in the log pane; once the terminal is back (the pane
    gone) the printed summary names the file that keeps it: chosen by the error's kind
    (remedies.unexpected), not by the title's first word or the remedy's wording."""
    from sapo_edge.tui import app as app_module

    def boom(*_a, **_k):
        raise RuntimeError("kaboom")

    app = SapoDashboard(Config(out_dir=str(tmp_path)), run=boom)

    async def drive():
        async with app.run_test(size=(120, 40)) as pilot:
            await asyncio.wait_for(app.workers.wait_for_complete(), BOUND)
            await pilot.pause()
            banner = app.query_one(ProblemBanner)
            assert "log pane (press l)" in banner.problem.remedy
            await pilot.press("q")
            await pilot.pause()

    asyncio.run(drive())
    assert app.fatal is not None and "RuntimeError" in app.fatal.title
    assert app_module._finish(app, app.cfg, "failed") == 1
    printed = capsys.readouterr().err
    assert "kaboom. The full traceback is in /" in printed and "log pane" not in printed
    kept = printed.split("The full traceback is in ")[1].split(" (attach")[0]
    assert "RuntimeError: kaboom" in open(kept, encoding="utf-8").read()
