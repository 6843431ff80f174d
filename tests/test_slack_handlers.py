"""What the `/eagle` handlers decide, said through the chat test bot (eaglebot.testing.chat):
the product's Slack app in process, its host `gpu-01` a scripted `Host`, so each test sees
exactly the commands the host was asked to run. The Slack surface itself (signatures, 401s,
retries, outages, Socket Mode, edit pacing, a real process killed after an approval) is
tests/test_slack_app.py's, over signed HTTP."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from support.history_seed import seed_run
from support.slack_harness import PLAYBOOKS

from eaglebot.facts.host import cluster
from eaglebot.frontends.chat.words import RUN, WORDS
from eaglebot.frontends.slack.tuning import APPLY_BEST_ACTION
from eaglebot.testing import Reply, Unscripted
from eaglebot.testing.chat import ChatBot

SINFO = (Path(__file__).parent / "fixtures" / "cluster" / "sinfo-N-h-o-NTE.txt").read_text()
IDLE = "".join(line for line in SINFO.splitlines(keepends=True) if line.startswith("gpu-01 "))
DRAINING = IDLE.replace("idle none", "draining eaglebot: GPU health")
GUARDED_DRAIN = {"name": "guarded-drain", "description": "drains the node, once approved",
                 "steps": [{"name": "drain", "skill": "node.drain", "confirm": True},
                           {"name": "after", "skill": "shell", "with": {"command": "echo drained"}}]}


@pytest.fixture
async def open_bot(tmp_path):
    opened: list[ChatBot] = []

    async def open_(**kw) -> ChatBot:
        kw.setdefault("playbooks", PLAYBOOKS)
        bot = await ChatBot.open(tmp_path / f"bot{len(opened)}", **kw)
        opened.append(bot)
        return bot

    yield open_
    for bot in opened:
        await bot.close()


async def test_dry_run_posts_the_plan_and_runs_nothing_on_the_host(open_bot):
    bot = await open_bot()
    said = await bot.say("marker gpu-01 path=/tmp/touched --dry-run")
    assert said.run["dry_run"] == 1
    plan = next(m for m in said.messages if "plan" in m.text).text
    assert "would run" in plan and "touch /tmp/touched" in plan
    assert bot.host("gpu-01").commands == []


HOSTILE = [
    "hello gpu-01; rm -rf /",
    "$(reboot)",
    "hello `reboot`",
    "hello greeting=\"unbalanced",
    "marker path=/tmp/x; rm -rf /",
    "héllo wörld",
    "hello &lt;!channel&gt;",
    "hello greeting=x\x07",
    "x" * 10_000,
]


async def test_hostile_slash_text_gets_a_clear_error_and_runs_nothing(open_bot):
    bot = await open_bot()
    for text in HOSTILE:
        said = await bot.say(text)
        assert said.status == 200, text
        assert (said.ack or "").startswith(":warning:"), (text, said.ack)
        assert "<!channel>" not in said.ack
        assert said.sent == [] and said.run is None
    assert await bot.runs() == [] and bot.host("gpu-01").calls == []


async def test_a_hostile_input_value_reaches_the_host_as_one_quoted_word(open_bot):
    bot = await open_bot()
    value = "$(touch /tmp/pwned)"
    bot.host("gpu-01").on(f"echo {shlex.quote(value)}", stdout=f"{value}\n")
    said = await bot.say(f"hello gpu-01 greeting='{value}'")
    assert said.run["status"] == "succeeded"
    assert bot.host("gpu-01").commands == [f"echo {shlex.quote(value)}"]
    steps = await bot.services.store.call(lambda s: s.steps(said.run["id"]))
    assert "$(touch" in steps[0]["output"]


async def test_failure_summary_shows_the_failing_step_error_and_log_tail(open_bot):
    bot = await open_bot()
    gpu = bot.host("gpu-01")
    gpu.on(lambda cmd: cmd.startswith("echo starting with hf_"), stdout="starting with hf_abcdefghijklmnopqrstuvwxyz0123\n",
           stderr="Scheduler hit an exception: boom\n", exit_status=3)
    said = await bot.say("fails gpu-01")
    summary = next(m for m in said.messages if "finished" in m.text).text
    assert "failed" in summary and "exit status 3" in summary and "Scheduler hit an exception" in summary
    assert "log tail of *boom*" in summary
    assert all("hf_abcdefghij" not in s.text for s in said.sent)   # secrets are never posted
    assert len(gpu.commands) == 1                                   # the step after the failure never ran


async def test_history_and_show_render_from_the_audit_store(open_bot):
    bot = await open_bot()
    bot.host("gpu-01").on("echo hello", stdout="hello\n")
    rid = (await bot.say("hello gpu-01")).run["id"]
    [hist] = (await bot.say("history")).messages
    assert hist.args["response_type"] == "in_channel"
    assert f"#{rid}" in hist.text and "hello" in hist.text and "UALICE" in hist.text
    [show] = (await bot.say(f"show {rid}")).messages
    assert "greet" in show.text and "succeeded" in show.text
    [err] = (await bot.say("show 999")).messages
    assert err.args["response_type"] == "ephemeral" and "no run #999" in err.text


async def test_schedule_lists_each_job_with_its_next_fire_time(open_bot):
    bot = await open_bot(schedules=[{"name": "nightly-bench", "playbook": "hello", "hosts": ["gpu-01"],
                                     "cron": "0 3 * * *", "timezone": "UTC"}])
    [r] = (await bot.say("schedule")).messages
    assert "nightly-bench" in r.text and "0 3 * * *" in r.text
    assert "03:00" in r.text                        # the next fire time


async def test_refusals_are_the_acks_text_and_audited(open_bot):
    bot = await open_bot(access={"operators": ["UALICE"], "approvers": ["UBOSS"], "viewers": ["UALICE", "UBOB"],
                                 "playbooks": {"fails": ["UCAROL"]}})
    assert "only operators" in (await bot.say("hello", user="UBOB")).ack    # a viewer, not an operator
    assert "allowlist" in (await bot.say("fails", user="UALICE")).ack       # not on the playbook's allowlist
    assert "only viewers" in (await bot.say("history", user="UEVE")).ack    # not even a viewer
    assert "only operators" in (await bot.say("cancel 1", user="UBOB")).ack
    events = await bot.services.store.call(lambda s: list(s.db.query(
        "select * from events where kind = 'access_denied'")))
    who = " ".join(e["message"] for e in events)
    assert len(events) == 4 and "UBOB" in who and "UEVE" in who and "UALICE" in who
    assert await bot.runs() == [] and bot.record.sent == []


async def test_regressions_and_warnings_are_in_the_summary_and_broadcast_to_the_channel(open_bot):
    from eaglebot.sdk import Regression

    pb = {"name": "bench", "description": "a benchmark",
          "steps": [{"name": "measure", "skill": "shell", "with": {"command": "echo 80 tok/s"}},
                    {"name": "flaky probe", "skill": "shell", "continue_on_error": True,
                     "with": {"command": "echo 'speculative_num_draft_tokens is adjusted' >&2; exit 1"}}]}
    bot = await open_bot(playbooks={"bench": pb})
    bot.host("gpu-01").on("echo 80 tok/s", stdout="80 tok/s\n")
    bot.host("gpu-01").on(lambda c: c.startswith("echo 'speculative"), stderr="speculative_num_draft_tokens is adjusted\n",
                          exit_status=1)

    async def judge(engine, outcome, playbook):
        return [Regression("output_throughput", 80.0, 90.0, -11.1, "below the baseline by more than 5%",
                           host="gpu-01")]

    bot.services.engine.post_run_hooks.append(judge)
    said = await bot.say("bench")
    summary = next(m for m in said.messages if "finished" in m.text)
    assert summary.args.get("reply_broadcast") is True
    assert "REGRESSION" in summary.text and "output_throughput" in summary.text and "-11.1%" in summary.text
    assert "flaky probe failed (continue_on_error)" in summary.text


async def test_trend_uploads_the_plot_into_a_thread(open_bot):
    bot = await open_bot()
    for v in (90.0, 91.5, 89.0, 90.4, 54.8):
        seed_run(bot.services.store.sync, "hello", "gpu-01", metrics={"output_throughput": v})
    said = await bot.say("trend hello gpu-01 output_throughput")
    [parent] = [s for s in said.sent if s.method == "chat.postMessage"]
    [done] = [s for s in said.sent if s.method == "files.completeUploadExternal"]
    assert done.args["thread_ts"] == parent.answer["ts"] and done.args["channel_id"] == bot.channel
    assert "output_throughput" in parent.text
    assert "eagle-trend-" not in parent.text and ".png" not in parent.text   # no path of the bot's
    [upload] = [s for s in said.sent if s.method == "upload"]
    assert upload.args["size"] > 5000     # a real matplotlib PNG, not a stub


# -- approvals: the card, who may click it, what runs after -------------------------------------------

async def test_an_approval_card_waits_for_an_approver_and_then_the_step_runs(open_bot):
    bot = await open_bot(hosts={"gpu-01": {"scheduler": "slurm"}}, playbooks={"guarded-drain": GUARDED_DRAIN})
    gpu = bot.host("gpu-01")
    gpu.on(cluster.sinfo_command("gpu-01"), Reply(stdout=IDLE), Reply(stdout=DRAINING))
    gpu.on(cluster.scontrol_drain("gpu-01", "eaglebot: GPU health"), stdout="")
    gpu.on("echo drained", stdout="drained\n")
    said = await bot.say("guarded-drain gpu-01")
    assert said.card is not None and said.run["status"] == "running"
    assert "<@UBOSS>" in said.card.text and "drain gpu-01 in Slurm" in said.card.text
    assert [b["text"]["text"] for b in said.card.buttons] == ["Approve", "Deny"]
    assert gpu.commands == [cluster.sinfo_command("gpu-01")]        # only the probe, before the decision
    refused = await bot.click(said.card, "Approve", user="UEVE")
    assert "only approvers" in refused.text and refused.messages[0].args["response_type"] == "ephemeral"
    assert (await bot.runs())[0]["status"] == "running" and len(gpu.commands) == 1
    done = await bot.click(said.card, "Approve", user="UBOSS")
    assert (await bot.runs())[0]["status"] == "succeeded"
    assert gpu.commands == [cluster.sinfo_command("gpu-01"), cluster.scontrol_drain("gpu-01", "eaglebot: GPU health"),
                            cluster.sinfo_command("gpu-01"), "echo drained"]
    assert any("Approved by <@UBOSS>" in s.text for s in done.sent if s.method == "chat.update")
    late = await bot.click(said.card, "Deny", user="UBOSS")
    assert "no longer waiting" in late.text


async def test_a_denied_card_fails_the_run_and_changes_nothing(open_bot):
    bot = await open_bot(hosts={"gpu-01": {"scheduler": "slurm"}}, playbooks={"guarded-drain": GUARDED_DRAIN})
    gpu = bot.host("gpu-01").on(cluster.sinfo_command("gpu-01"), stdout=IDLE)
    said = await bot.say("guarded-drain gpu-01")
    await bot.click(said.card, "Deny", user="UBOSS")
    assert (await bot.runs())[0]["status"] == "failed"
    assert gpu.commands == [cluster.sinfo_command("gpu-01")]


async def drain_bot(open_bot, **kw) -> ChatBot:
    """A bot whose gpu-01 is a Slurm node, idle, with `guarded-drain` (its drain asks an approver)."""
    bot = await open_bot(hosts={"gpu-01": {"scheduler": "slurm"}}, playbooks={"guarded-drain": GUARDED_DRAIN}, **kw)
    gpu = bot.host("gpu-01")
    gpu.on(cluster.sinfo_command("gpu-01"), Reply(stdout=IDLE), Reply(stdout=DRAINING))
    gpu.on(cluster.scontrol_drain("gpu-01", "eaglebot: GPU health"), stdout="")
    gpu.on("echo drained", stdout="drained\n")
    return bot


async def test_a_denied_card_names_who_denied(open_bot):
    bot = await drain_bot(open_bot)
    said = await bot.say("guarded-drain gpu-01")
    denied = await bot.click(said.card, "Deny", user="UBOSS")
    assert any(s.args.get("ts") == said.card.answer["ts"] and "Denied by <@UBOSS>" in s.text
               for s in denied.sent if s.method == "chat.update")


async def test_a_cancelled_approval_says_cancelled_by_whom_not_timed_out(open_bot, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="eaglebot.audit")
    bot = await drain_bot(open_bot, access={"operators": ["UALICE", "UBOSS"], "approvers": ["UBOSS", "UALICE"],
                                            "viewers": ["*"]})
    said = await bot.say("guarded-drain gpu-01", user="UALICE")
    assert "Only approvers can decide: <@UBOSS>." in said.card.text and "<@UALICE>" not in str(said.card.blocks)
    rid = said.run["id"]
    cancelled = await bot.say(f"cancel {rid}", user="UBOSS")
    assert (await bot.services.store.call(lambda s: s.get_run(rid)))["status"] == "cancelled"
    assert bot.host("gpu-01").commands == [cluster.sinfo_command("gpu-01")]
    [update] = [s for s in cancelled.sent if s.method == "chat.update" and s.args.get("ts") == said.card.answer["ts"]
                and "Cancelled by" in s.text]
    assert "Cancelled by <@UBOSS>" in update.text and "No decision" not in update.text
    rows = await bot.services.store.call(lambda s: list(s.db.query("select status from approvals")))
    assert rows == [{"status": "cancelled"}]
    # the operators' log says what the store says (issue 34: it said "expired")
    decided = [r.getMessage() for r in caplog.records if r.name == "eaglebot.audit"
               and r.getMessage().startswith(f"approval for run #{rid} ")]
    assert decided == [f'approval for run #{rid} cancelled host=gpu-01 step=drain by=UBOSS'], decided


async def test_the_requester_cannot_approve_their_own_confirm_step(open_bot):
    bot = await drain_bot(open_bot, access={"operators": ["UALICE"], "approvers": ["UALICE", "UBOSS"]})
    said = await bot.say("guarded-drain gpu-01", user="UALICE")
    own = await bot.click(said.card, "Approve", user="UALICE")
    assert "cannot approve its confirm steps yourself" in own.text
    assert (await bot.runs())[0]["status"] == "running" and len(bot.host("gpu-01").commands) == 1
    await bot.click(said.card, "Approve", user="UBOSS")
    assert (await bot.runs())[0]["status"] == "succeeded"
    ev = await bot.services.store.call(lambda s: list(s.db.query(
        "select actor, reason from events where kind = 'access_denied'")))
    assert ev[0]["actor"] == "UALICE" and "self_approval" in ev[0]["reason"]


async def test_an_approval_asked_refused_and_decided_is_one_log_line_each(open_bot, caplog):
    import logging

    from eaglebot.frontends.oplog import RunLog

    caplog.set_level(logging.INFO, logger="eaglebot.audit")
    bot = await drain_bot(open_bot)   # operators: UALICE, approvers: UBOSS
    bot.services.engine.watchers.append(RunLog(bot.services.redactor.text))   # as `eagle serve` does
    said = await bot.say("guarded-drain gpu-01", user="UALICE")
    rid = said.run["id"]
    await bot.click(said.card, "Approve", user="UALICE")
    await bot.click(said.card, "Approve", user="UBOSS")
    assert (await bot.runs())[0]["status"] == "succeeded"
    audit = [r for r in caplog.records if r.name == "eaglebot.audit"]
    assert [r.getMessage().split(" host=")[0].split(" outcome=")[0] for r in audit] == [
        f"approval requested for run #{rid}",
        f'rejected user=UALICE text="approve run #{rid} on gpu-01" why="only approvers can approve or deny; '
        'add your Slack user id (UALICE) to access.approvers in eagle.yaml"',
        f"approval for run #{rid} approved by=UBOSS",
        f'command user=UALICE text="guarded-drain gpu-01" run=#{rid} playbook=guarded-drain hosts=gpu-01']
    assert all(r.levelno == logging.INFO for r in audit)


async def test_only_approvers_may_reload(open_bot):
    bot = await open_bot()   # operators: UALICE, approvers: UBOSS
    said = await bot.say("reload", user="UALICE")
    assert said.status == 200 and "only approvers can reload" in said.ack
    rows = await bot.services.store.call(lambda s: list(s.db.query(
        "select kind, actor, text from events where kind = 'access_denied'")))
    assert rows and rows[-1]["actor"] == "UALICE" and "reload" in rows[-1]["text"]


async def test_without_an_access_section_a_run_is_refused_naming_the_key_and_viewing_works(open_bot):
    bot = await open_bot(access=None)
    said = await bot.say("hello", user="UALICE")
    assert said.status == 200 and "access.operators" in said.ack and "eagle.yaml" in said.ack
    viewed = await bot.say("history", user="UALICE")
    assert viewed.ack is None and viewed.messages                 # viewing still works
    rows = await bot.services.store.call(lambda s: list(s.db.query(
        "select actor, text, reason from events where kind = 'access_denied'")))
    assert rows[0]["actor"] == "UALICE" and rows[0]["text"] == "/eagle hello"
    assert "access.operators" in rows[0]["reason"]
    assert await bot.runs() == []


async def test_a_slash_command_is_authorized_once_before_its_ack(open_bot, monkeypatch):
    """The Slack listener admits the command (its refusal is the ack's text); the router then
    executes what was admitted without checking again."""
    from eaglebot.frontends.chat import router

    checked = []
    real = router.authorize
    monkeypatch.setattr(router, "authorize", lambda *a, **kw: checked.append(a[1].name) or real(*a, **kw))
    bot = await open_bot()
    said = await bot.say("status", user="UALICE")
    assert said.ack is None and said.messages
    assert checked == ["status"]


async def test_a_command_the_host_was_not_scripted_for_fails_the_test(open_bot):
    bot = await open_bot()
    with pytest.raises(Unscripted, match="unscripted command 'echo hello'"):
        await bot.say("hello gpu-01")


# -- a playbook's allowlist holds for every word that runs it (issue 46 item 3) --------------------

RELAUNCH = {"name": "relaunch", "description": "stand-in relaunch",
            "inputs": {"spec_steps": {"type": "int", "default": 3}},
            "steps": [{"skill": "shell", "with": {"command": "echo relaunch {{ spec_steps }}"}}]}

# How each word of the table asks for a run of `relaunch` (None: the word runs no playbook).
SAMPLES: dict[str, str | None] = {
    "run": "relaunch gpu-01",
    "rerun": "rerun {good}",
    "sweep": "sweep relaunch gpu-01 spec_steps=3,5",
    "tune": "tune relaunch gpu-01 batch_sizes=1",
    "bisect": "bisect {good} {bad} gpu-01",
    **{w: None for w in ("help", "playbooks", "hosts", "history", "show", "status", "fleet", "cancel", "logs",
                         "schedule", "baseline", "trend", "reload", "diff", "ack")},
}
# Other ways into the same words (their arguments pick another path).
EXTRA = ["sweep resume {sweep}", "tune apply {tune}"]


def test_every_word_of_the_table_says_whether_it_runs_a_playbook():
    missing = [w.name for w in (RUN, *WORDS) if w.name not in SAMPLES]
    assert not missing, f"add to SAMPLES how /eagle {missing[0]} runs a playbook (or None if it runs none)"
    assert set(SAMPLES) == {w.name for w in (RUN, *WORDS)}, "SAMPLES names a word the table does not have"


async def test_a_user_off_the_allowlist_is_refused_relaunch_by_every_word(open_bot):
    bot = await open_bot(access={"operators": ["UALICE", "UBOB"], "approvers": ["UBOSS"], "viewers": ["*"],
                                 "playbooks": {"relaunch": ["UALICE"]}},
                         playbooks={**PLAYBOOKS, "relaunch": RELAUNCH})
    bot.host("gpu-01").on("echo relaunch 3", stdout="relaunch 3\n")

    async def query(sql: str, args: list | None = None) -> list[dict]:
        return await bot.services.store.call(lambda s: list(s.db.query(sql, args or [])))

    # two runs of relaunch by someone on the list: what rerun and bisect act on
    ids = [(await bot.say("relaunch gpu-01", user="UALICE")).run["id"] for _ in range(2)]
    assert [r["status"] for r in await bot.runs()] == ["succeeded", "succeeded"]
    store = bot.services.store
    sweep = await store.call(lambda s: s.create_sweep(kind="sweep", playbook="relaunch", host="gpu-01",
                                                      spec={"axes": {}}, actor="UALICE", origin="slack", points=[]))
    tune_id = await store.call(lambda s: s.create_sweep(kind="tune", playbook="relaunch", host="gpu-01",
                                                        spec={"fixed": {}}, actor="UALICE", origin="slack", points=[]))
    tune_run = await store.call(lambda s: s.start_run([], {
        "playbook": "tune", "hosts": ["gpu-01"], "inputs": {"tune_id": tune_id}, "variables": {}, "actor": "UALICE",
        "origin": "slack"}))
    await store.call(lambda s: s.finish_run(tune_run, "succeeded", exit_code=0))
    texts = [t for t in SAMPLES.values() if t is not None] + EXTRA
    fill = {"good": ids[0], "bad": ids[1], "sweep": sweep, "tune": tune_run}
    for text in texts:
        said = await bot.say(text.format(**fill), user="UBOB")
        assert said.status == 200
        [why] = await query("select reason from events where kind = 'access_denied' order by id desc limit 1")
        assert "access.playbooks.relaunch" in why["reason"], (text, why)
    # the Apply button of a (scheduled) tuning run is typing `/eagle tune apply RUN`
    assert (await bot.press(APPLY_BEST_ACTION, f"tune apply {tune_run}", user="UBOB")).status == 200
    # nothing ran, nothing was recorded for UBOB but the refusals
    assert await query("select id from runs where actor = 'UBOB'") == []
    assert await query("select id from sweeps where actor = 'UBOB'") == []
    denied = await query("select actor, reason from events where kind = 'access_denied'")
    assert len(denied) == len(texts) + 1 and {d["actor"] for d in denied} == {"UBOB"}
    assert "access.playbooks.relaunch" in denied[-1]["reason"]
    # and the one on the list is not refused by the same check
    rerun = (await bot.say(f"rerun {ids[0]}", user="UALICE")).run
    assert rerun["rerun_of"] == ids[0] and rerun["status"] == "succeeded"
