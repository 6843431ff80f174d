"""A nightly `eagle tune` (a schedule of `playbook: tune`): checked when the config loads (it
proposes, it never applies), and a fire that finds a config beating the deployed one beyond the
noise posts a proposal, changes nothing, and leaves the host on the config it found running."""
from __future__ import annotations

import json

import pytest
import yaml
from support.helpers import eagle_json
from support.tuning_sandbox import HOST, sim_host

from eaglebot.config import load_settings
from eaglebot.engine.schedules import check_schedules
from eaglebot.frontends.service.scheduler import Scheduler
from eaglebot.frontends.services import Services


class Posts:
    text_summaries = False

    def __init__(self):
        self.posts: list[str] = []
        self.uploads: list[str] = []

    def observer(self, schedule):
        from eaglebot.engine.runner import Observer
        return Observer()

    async def post(self, channel, text):
        self.posts.append(text)
        return "1700000000.000100"

    async def upload(self, channel, thread_ts, path, title):
        self.uploads.append(title)


def _with_schedule(cfg, inputs):
    doc = yaml.safe_load(cfg.read_text())
    doc["schedules"] = [{"name": "nightly-tune", "playbook": "tune", "hosts": [HOST], "cron": "0 3 * * *",
                         "inputs": inputs}]
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_a_scheduled_tune_is_checked_and_may_not_apply(tmp_path):
    with sim_host(tmp_path) as sb:
        _with_schedule(sb["cfg"], {"playbook": "relaunch", "batch_sizes": [1, 8], "apply": True, "colour": 1})
        problems = [p.message for p in check_schedules(load_settings(str(sb["cfg"])))]
        assert any("never applies it: remove `apply`" in p for p in problems)
        assert any("tune takes no input 'colour'" in p for p in problems)
        _with_schedule(sb["cfg"], {"playbook": "relaunch", "batch_sizes": [1, 8], "inputs": {"bench_prompts": 4}})
        assert check_schedules(load_settings(str(sb["cfg"]))) == []


@pytest.mark.e2e  # a scheduled tuning run, whole
async def test_a_fire_proposes_a_better_config_and_leaves_the_deployed_one_running(tmp_path):
    with sim_host(tmp_path) as sb:
        res, out = eagle_json("run", "relaunch", "-H", HOST, "--yes", "-e", "spec_steps=1", "-e", "spec_topk=1",
                              "-e", "spec_draft_tokens=2", "-e", "bench_prompts=0", config=sb["cfg"])
        assert res.returncode == 0
        deployed = out["run_id"]
        _with_schedule(sb["cfg"], {"playbook": "relaunch", "batch_sizes": "1,8", "steps": "1-4", "topk": [1],
                                   "repeats": 1, "inputs": {"bench_prompts": 0}})
        svc = await Services.open(load_settings(str(sb["cfg"])))
        hooks = Posts()
        try:
            run_id = await Scheduler(svc, hooks).run_schedule(svc.settings.schedules[0])
            run = await svc.store.call(lambda s: s.get_run(run_id))
            assert run["playbook"] == "tune" and run["origin"] == "schedule" and run["status"] == "succeeded"
            assert run["actor"] == "schedule:nightly-tune"
            [text] = hooks.posts
            assert f"scheduled tune nightly-tune: tuning run #{run_id}" in text
            assert f"nothing was changed: `/eagle tune apply {run_id}` deploys it after an approval" in text
            assert hooks.uploads == [f"tuning run #{run_id}: Pareto plot"]
            assert await svc.store.call(lambda s: s.db.execute(
                "select count(*) from approvals").fetchone()[0]) == 0
            steps = await svc.store.call(lambda s: s.steps(run_id))
            restore = next(s for s in steps if s["skill"] == "tune.restore")
            assert restore["status"] == "changed" and f"the inputs of run #{deployed}" in restore["summary"]
            last = (await svc.store.call(lambda s: s.history(playbook="relaunch", limit=1)))[0]
            assert (last["inputs"]["spec_steps"], last["inputs"]["spec_topk"]) == (1, 1)
            current = next(s for s in steps if s["skill"] == "tune.current")
            assert current["status"] == "ok" and "steps=1 topk=1 draft=2" in current["summary"]
            fire = await svc.store.call(lambda s: s.last_fire("nightly-tune"))
            assert fire["run_id"] == run_id and fire["status"] == "succeeded"
            result = json.loads(next(s for s in steps if s["skill"] == "tune.choose")["data"])
            assert result["proposal"]["beats_current"] is True and result["proposal"]["gain_pct"] > 10
        finally:
            await svc.close()
