"""A sign of life while a step runs long: the engine's heartbeat (elapsed time and the last
output line), on the terminal and in the Slack thread's progress message (through the edit
coalescer). The interval is 10 s in production; the tests shorten it."""
from __future__ import annotations

import io

from support.slack_harness import open_harness

from eaglebot.engine.runner import HEARTBEAT_S, RunRequest
from eaglebot.frontends.cli.terminal import TerminalObserver, paint, result_text, use_colour
from eaglebot.history.view import RunView

import yaml

TICKS = {"name": "ticks", "steps": [{"name": "warm up", "skill": "shell",
                                     "with": {"command": "echo loading weights; sleep 1.5; echo ready"}}]}


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_a_long_step_prints_a_heartbeat_with_elapsed_time_and_last_line(services, tmp_path):
    assert HEARTBEAT_S == 10.0
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "ticks.yaml").write_text(yaml.safe_dump(TICKS))
    svc = await services(playbooks_dir=str(tmp_path / "books"))
    svc.engine.heartbeat_s = 0.4
    stream = io.StringIO()
    out = await svc.engine.run(RunRequest("ticks"), TerminalObserver(stream))
    assert out.status == "succeeded"
    beats = [line for line in stream.getvalue().splitlines() if "still running" in line]
    assert beats and "[local] 1/1 warm up: still running (" in beats[0]
    # each beat names the step's last line at its time: "ready" too, when a loaded machine beats
    # between the echo and the step's end
    assert beats[0].endswith("— loading weights") and all(b.endswith(("— loading weights", "— ready")) for b in beats)
    view = await svc.store.call(lambda s: RunView.load(s, out.run_id))
    block = result_text(view)
    assert block.count(f"run #{out.run_id}") == 1 and "succeeded in " in block


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Tty()) and not use_colour(io.StringIO())
    assert paint("failed", True) == "\x1b[31mfailed\x1b[0m" and paint("failed", False) == "failed"
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())


async def test_the_heartbeat_is_mirrored_in_the_slack_progress_message(tmp_path, fake):
    h = await open_harness(tmp_path, fake, playbooks={"ticks": TICKS})
    try:
        h.services.engine.heartbeat_s = 0.3
        await h.command("ticks")
        run = await h.wait_run(await h.last_run_id())
        assert run["status"] == "succeeded"
        await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update")
                                     if "running for" in c.all_text() and "last: loading weights" in c.all_text()])
    finally:
        await h.close()
