"""`/eagle tune` over real HTTP with signed requests, on a SIMULATED GPU host (local transport): the
tuning run's table in the channel, its Pareto plot uploaded to the thread, and `apply`: an approval
card an approver answers in the thread, then the relaunch with the result."""
from __future__ import annotations

import asyncio

import pytest

from support.slack_harness import approval_message, open_harness
from support.sshd import free_port
from test_sglang_sim import write_models

from eaglebot.frontends.slack import blocks as bk
from eaglebot.sim import install_sim_bin


@pytest.mark.e2e  # a whole tuning run through Slack
async def test_slash_tune_posts_the_table_and_plot_and_apply_waits_for_an_approver(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("EAGLE_SIM_LOAD_S", "0")
    monkeypatch.setenv("EAGLE_SIM_WARMUP_S", "0")
    monkeypatch.setenv("EAGLE_SIM_STATE", str(tmp_path / "sim-state"))
    sim = install_sim_bin(tmp_path / "sim-bin", tmp_path / "sim-state")
    target, draft = write_models(tmp_path / "models")
    hosts = {"sim": {"transport": "local", "vars": {"python": sim["python"], "nvidia_smi": sim["nvidia_smi"],
                                                     "model": str(target), "draft": str(draft), "port": free_port()}}}
    h = await open_harness(tmp_path, fake, playbooks={}, hosts=hosts, state_dir=str(tmp_path / "state"))
    try:
        status, _ = await h.command("tune relaunch sim --batch-sizes 1,8 steps=2-4 topk=1 repeats=1 prompts=4 "
                                    "output_len=16 apply")
        assert status == 200
        msg, key = await fake.wait_for(lambda: approval_message(fake), timeout=300)
        assert "relaunch sim with steps=" in msg.all_text()
        tune_run = next(r for r in await h.services.store.call(lambda s: s.history(limit=50)) if r["playbook"] == "tune")
        assert tune_run["status"] == "running" and tune_run["actor"] == "UALICE"
        before = [r["id"] for r in await h.services.store.call(lambda s: s.history(limit=50)) if r["playbook"] == "relaunch"]
        assert await h.click(bk.APPROVE_ACTION, key, user="UBOSS") == 200
        done = await h.wait_run(tune_run["id"], timeout=300)
        assert done["status"] == "succeeded"
        after = [r for r in await h.services.store.call(lambda s: s.history(limit=50)) if r["playbook"] == "relaunch"]
        assert len(after) == len(before) + 1 and after[0]["inputs"]["spec_topk"] == 1

        def table():
            return [c for c in fake.ok_calls_to("chat.postMessage")
                    if f"Tuning run #{tune_run['id']}" in c.all_text()]

        post = (await fake.wait_for(table, timeout=60))[0]
        text = post.all_text()
        assert "best (measured)" in text and "applied (approved by UBOSS)" in text
        upload = await fake.wait_for(lambda: [c for c in fake.calls_to("files.completeUploadExternal")
                                              if f"tune-{tune_run['id']}.png" in str(c.args.get("files"))], timeout=60)
        assert upload
        rows = await h.query("select status, decided_by from approvals where run_id = $1", [tune_run["id"]])
        assert rows == [{"status": "approved", "decided_by": "UBOSS"}]
        # the applied server is the test's to stop, through the bot, as a user would
        newest = (await h.services.store.call(lambda s: s.history(limit=1)))[0]["id"]
        status, _ = await h.command("stop sim")
        assert status == 200

        async def stop_run() -> int | None:
            rows = [r for r in await h.services.store.call(lambda s: s.history(limit=5)) if r["playbook"] == "stop" and r["id"] > newest]
            return rows[0]["id"] if rows else None
        rid = None
        deadline = asyncio.get_running_loop().time() + 60
        while rid is None and asyncio.get_running_loop().time() < deadline:
            rid = await stop_run()
            await asyncio.sleep(0.05)
        assert rid is not None, "no stop run was created"
        assert (await h.wait_run(rid, timeout=120))["status"] == "succeeded"
    finally:
        await h.close()
