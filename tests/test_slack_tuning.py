"""`/eagle sweep` over real HTTP with signed requests: the ranked table, the heatmap uploaded
to the thread (files_upload_v2 against the fake Web API), and the "Apply best" button
(operators only; a refusal is an audit row)."""
from __future__ import annotations

from support.slack_harness import open_harness

from eaglebot.frontends.slack.tuning import APPLY_BEST_ACTION

# A cheap playbook with a known optimum at a=3, b=2 (no server: metric.record of a formula).
TUNE = {
    "name": "toy",
    "description": "a toy objective with its optimum at a=3, b=2",
    "inputs": {"a": {"type": "int", "default": 1}, "b": {"type": "int", "default": 1}},
    "steps": [{"skill": "metric.record",
               "with": {"name": "output_throughput", "value": "{{ 100 - (a - 3) ** 2 - (b - 2) ** 2 }}",
                        "unit": "tok/s"}}],
}


async def test_slash_sweep_posts_the_table_uploads_the_heatmap_and_apply_best_is_for_operators(tmp_path, fake):
    h = await open_harness(tmp_path, fake, playbooks={"toy": TUNE})
    try:
        status, _ = await h.command("sweep toy local a=1,3,5 b=1,2")
        assert status == 200

        def sweep_post():
            for c in fake.ok_calls_to("chat.postMessage"):
                for b in c.blocks():
                    if b.get("type") == "actions" and b["elements"][0].get("action_id") == APPLY_BEST_ACTION:
                        return c, b["elements"][0]["value"]
            return None

        msg, value = await fake.wait_for(sweep_post)
        assert value == "toy local a=3 b=2"
        assert "best: a=3 b=2 → 100.0 tok/s" in msg.all_text()
        done = (await fake.wait_for(lambda: fake.calls_to("files.completeUploadExternal")))[0]
        assert "sweep-1.png" in done.args["files"] and done.args.get("thread_ts") == msg.answer["ts"]
        runs_before = len(await h.services.store.call(lambda s: s.history(limit=100)))
        assert runs_before == 8          # the sweep's own run, its 6 points, then the best (not the last point) put back
        assert "host local left on the best point (a=3 b=2: relaunched by run #8)" in msg.all_text()
        # a viewer may not apply it: refused, audited, nothing runs
        assert await h.click(APPLY_BEST_ACTION, value, user="UEVE") == 200
        denied = await fake.wait_for(lambda: [e for e in fake.calls if "only operators" in e.all_text()])
        assert denied
        rows = await h.query("select message from events where kind = 'access_denied'")
        assert rows and "UEVE" in rows[0]["message"]
        # an operator applies it: one more run, with the winning inputs
        assert await h.click(APPLY_BEST_ACTION, value, user="UALICE") == 200
        rid = await fake.wait_for(lambda: None if len(h.services.store.sync.history(limit=100)) <= runs_before
                                  else h.services.store.sync.history(limit=1)[0]["id"])
        run = await h.wait_run(rid)
        assert run["playbook"] == "toy" and run["inputs"] == {"a": 3, "b": 2} and run["actor"] == "UALICE"
    finally:
        await h.close()
