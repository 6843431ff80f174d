"""Slack's whole-message limit: a 64-host x 8-step run with 40 regressions and 9,000-character
log lines, over signed HTTP against the fake Web API (which answers `msg_blocks_too_long` as
Slack does). Every chat.postMessage / chat.update stays within the budget, the final summary
is posted, and the full summary and the failing steps' logs are attached with files_upload_v2."""
from __future__ import annotations

import re
import textwrap


from support.slack_harness import open_harness

from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.budget import MESSAGE_BUDGET, fit, text_len

HOSTS = [f"h{i:02d}" for i in range(64)]
FAILING = ["h03", "h17", "h42", "h60", "h61"]

NOISY = textwrap.dedent('''
    """A team skill for the budget test: metrics, regressions and long log lines.

    ```yaml
    - skill: team.noisy
    ```
    """
    from pydantic import Field

    from eaglebot.sdk import Metric, Regression, SkillParams, StepResult

    NAME = "team.noisy"


    class Params(SkillParams):
        regressions_on: str = Field("", description="the host that reports 40 regressions")
        fail_on: list[str] = Field(default_factory=list, description="hosts where the step fails")
        lines: int = Field(0, description="log lines to print")
        line_len: int = Field(9000, description="characters per log line")


    async def run(ctx, params):
        for i in range(params.lines):
            ctx.log(f"line {i} <&> " + "&<>x" * (params.line_len // 4))
        if ctx.host_name in params.fail_on:
            return StepResult.failed(f"{ctx.host_name}: Scheduler hit an exception <&> " + "y" * 600)
        regs = [Regression(f"metric_{i}_" + "m" * 30, 50.0 + i, 100.0, -50.0 + i,
                           "attributed to: " + "a long reason <&> " * 25, host=ctx.host_name)
                for i in range(40)] if ctx.host_name == params.regressions_on else []
        metrics = [Metric("output_throughput", 1234.5678, "tok/s"), Metric("median_itl_ms", 7.7, "ms", "lower")]
        return StepResult.ok("measured", metrics=metrics, regressions=regs)
''')

WIDE = {
    "name": "wide", "description": "64 hosts x 8 steps",
    "steps": [*({"name": f"note {i}", "skill": "audit.note", "with": {"message": f"step {i} <&>"}} for i in range(6)),
              {"name": "measure", "skill": "team.noisy", "with": {"regressions_on": "h00"}},
              {"name": "long logs", "skill": "team.noisy", "with": {"fail_on": FAILING, "lines": 5}}],
}

ENTITY_SPLIT = re.compile(r"&(?!amp;|lt;|gt;)")


def test_fit_keeps_blocks_in_order_and_says_what_it_left_out():
    blocks = [bk.section("x" * 2900) for _ in range(10)]
    out = fit(blocks)
    assert text_len(out) <= MESSAGE_BUDGET and out[:3] == blocks[:3]
    assert "7 more block(s) left out" in out[-1]["elements"][0]["text"]


def test_cutting_never_splits_an_escape_entity():
    text = "<&>" * 5000
    for b in bk.code_sections(text, max_blocks=50) + bk.text_blocks(text):
        t = b.get("text", {}).get("text", "") if b["type"] == "section" else ""
        assert not ENTITY_SPLIT.search(t) and len(t) <= bk.MAX_SECTION
    assert not ENTITY_SPLIT.search(bk.clip(bk.escape("a<b" * 100), 101))


async def test_a_64_host_run_stays_within_slacks_message_budget_and_attaches_the_rest(tmp_path, fake):
    team = tmp_path / "team"
    team.mkdir()
    (team / "noisy.py").write_text(NOISY)
    hosts = {h: {"transport": "local"} for h in HOSTS}
    h = await open_harness(tmp_path, fake, playbooks={"wide": WIDE}, hosts=hosts, groups={"all": HOSTS},
                           skill_paths=[str(team)], max_parallel_hosts=64,
                           access={"operators": ["UALICE"], "approvers": ["UBOSS"]})
    try:
        status, _ = await h.command("wide all")
        assert status == 200
        rid = await h.last_run_id()
        run = await h.wait_run(rid, timeout=120)
        assert run["status"] == "failed"
        final = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                             if f"run #{rid}" in c.all_text() and "finished" in c.all_text()], 60)
        uploads = await fake.wait_for(lambda: len(fake.ok_calls_to("files.completeUploadExternal")) >= 6 and
                                      fake.ok_calls_to("files.completeUploadExternal"), 60)
    finally:
        await h.close()
    messages = fake.calls_to("chat.postMessage") + fake.calls_to("chat.update")
    sizes = []
    for c in messages:
        blocks = c.blocks()
        sizes.append(text_len(blocks))
        assert c.status == 200, c.answer            # nothing was refused (msg_blocks_too_long, invalid_blocks)
        assert text_len(blocks) <= MESSAGE_BUDGET and len(blocks) <= bk.MAX_BLOCKS
        for b in blocks:
            t = (b.get("text") or {}).get("text") or ""
            assert len(t) <= (bk.MAX_HEADER if b["type"] == "header" else bk.MAX_SECTION)
            assert not ENTITY_SPLIT.search(t)
    print(f"\nlargest message: {max(sizes)} characters of block text over {len(messages)} posts/updates")
    text = final[0].all_text()
    assert "512 steps on 64 host(s)" in text and "40 regression(s)" in text and "failed on (5)" in text
    assert f"run-{rid}-summary.txt" in text
    titles = [f["title"] for c in uploads for f in __import__("json").loads(c.args["files"])]
    assert titles[0] == f"run-{rid}-summary.txt"
    assert f"run-{rid}-h03-long-logs.log" in titles and f"run-{rid}-more-failed-logs.log" in titles
    assert f"run-{rid}-recap.txt" in titles  # 64 hosts: the message lists 20, the file all of them
    assert all(c.args.get("thread_ts") == run["thread_ts"] for c in uploads)
    biggest = max(c.args["size"] for c in fake.calls_to("upload"))
    assert biggest > 5 * 9000                      # whole 9,000-character lines, not a tail
