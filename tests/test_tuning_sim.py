"""Sweep and bisection end to end on the SIMULATED SGLang server (local transport): every
point is a real relaunch (a real process, real HTTP) and a real bench_serving run; only the
performance numbers come from the simulator's model, with seeded noise."""
from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
import yaml
from support.tuning_sandbox import HOST, sim_host

from eaglebot.config import load_settings
from eaglebot.frontends.cli.main import main
from eaglebot.frontends.services import Services
from eaglebot.tuning import sweep as sw
from eaglebot.tuning.bisect import bound
from eaglebot.store import Store

FAST = ["bench_prompts=8", "bench_output_len=64"]


@pytest.mark.e2e  # a whole sweep on the simulator
def test_a_3x2x2_sweep_ranks_the_planted_optimum_first_skips_rewrites_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)   # the text resume writes its heatmap to ./sweep-ID.png
    with sim_host(tmp_path) as sb:
        cfg = sb["cfg"]

        async def start_and_interrupt() -> int:
            svc = await Services.open(load_settings(str(cfg)))
            try:
                axes, fixed, repeats = sw.parse_assignments(["spec_steps=3,5,7", "spec_topk=1,4",
                                                             "spec_draft_tokens=4,8", "repeats=2", *FAST])
                sid = await sw.create(svc.engine, sw.SweepRequest("relaunch", HOST, axes, fixed, repeats),
                                      actor="t", origin="cli")
                await sw.run_points(svc.engine, sid, actor="t", origin="cli", assume_yes=True, stop_after=3)
                return sid
            finally:
                await svc.close()

        sid = asyncio.run(start_and_interrupt())
        store = Store(sb["db"])
        runs_before = len(store.history(limit=100))
        assert runs_before == 3 + 1       # and the sweep's own run (issue 42: its points are its children)
        capsys.readouterr()
        png = tmp_path / "sweep.png"
        rc = main(["--config", str(cfg), "sweep", "resume", str(sid), "--yes", "--json", "--out", str(png)])
        out = json.loads(capsys.readouterr().out)
        assert rc == 0
        # 12 points: 4 are combinations SGLang rewrites (topk 1 forces draft tokens = steps + 1)
        assert len(out["skipped"]) == 4 and all("would rewrite" in p["reason"] for p in out["skipped"])
        assert len(out["ranked"]) == 8 and out["pending"] == [] and out["failed"] == []
        # resumed: the 3 finished points were not redone; the ninth run puts the best point back (issue 34:
        # the host stayed on the last point, (7, 4, 8), and nothing said so); the two sweep runs are their parents
        assert len(store.history(limit=100)) == 9 + 2
        sweeps = store.history(limit=100, top_level=True)
        assert [r["playbook"] for r in sweeps] == ["sweep", "sweep"]
        assert store.child_counts([r["id"] for r in sweeps]) == {sweeps[0]["id"]: 6, sweeps[1]["id"]: 3}
        assert [r["status"] for r in sweeps] == ["succeeded", "failed"]     # the first was interrupted
        best = out["ranked"][0]
        assert best["inputs"] == {"spec_steps": "5", "spec_topk": "4", "spec_draft_tokens": "8"}
        assert best["repeats"] == 2 and best["throughput_spread"] is not None
        assert best["idx"] in out["pareto"]
        assert out["simulated"] is True
        assert out["apply_best"].startswith(f"relaunch {HOST} ") and "spec_steps=5" in out["apply_best"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        final = out["final"]
        assert final["on_best"] is True and final["run_id"] not in {p["run_id"] for p in out["ranked"]}
        assert final["state"] == (f"host {HOST} left on the best point (spec_steps=5 spec_topk=4 "
                                  f"spec_draft_tokens=8: relaunched by run #{final['run_id']})")
        last = store.get_run(final["run_id"])
        assert last["status"] == "succeeded" and last["inputs"]["bench_prompts"] == 0
        assert not [s for s in store.steps(final["run_id"]) if s["skill"] == "bench.serving" and s["status"] == "ok"]
        # the server that answers now runs the best point's settings
        port = yaml.safe_load(cfg.read_text())["hosts"][HOST]["vars"]["port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=60) as r:
            info = json.load(r)
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
                info["speculative_num_draft_tokens"]) == (5, 4, 8)
        # the text says it too, and a resume of the finished sweep relaunches nothing more
        rc = main(["--config", str(cfg), "sweep", "resume", str(sid), "--yes"])
        text = capsys.readouterr().out
        assert rc == 0 and final["state"] in text and len(store.history(limit=100)) == 11
        assert (tmp_path / f"sweep-{sid}.png").is_file()
        # bad input: one sentence, exit 2, an audit record, nothing launched
        capsys.readouterr()
        rc = main(["--config", str(cfg), "sweep", "relaunch", "-H", HOST, "spec_steps=3,99"])
        assert rc == 2 and "above the maximum" in capsys.readouterr().err
        assert len(store.history(limit=100)) == 11         # a rejected request is an event, not a run row
        ev = store.events(kind="rejected", limit=1)
        assert ev and "above the maximum" in ev[0]["reason"]


@pytest.mark.e2e  # a whole bisect on the simulator
def test_bisect_names_the_one_planted_culprit_among_6_changes_within_the_bound(tmp_path, capsys):
    with sim_host(tmp_path) as sb:
        cfg = sb["cfg"]
        spec = ["-e", "spec_steps=5", "-e", "spec_topk=4", "-e", "spec_draft_tokens=8", "-e", "bench_prompts=8",
                "-e", "bench_output_len=64", "-e", "bench_repeats=2"]
        assert main(["--config", str(cfg), "run", "relaunch", "-H", HOST, "--yes", *spec,
                     "-e", "aux_layers=[2,30,58]", "-e", "mem_fraction=0.8",
                     "-e", 'env={"NCCL_MIN_NCHANNELS": "4"}']) == 0
        good = Store(sb["db"]).last_run_id()
        # six changes at once; only the capture layers matter to the (SIMULATED) acceptance
        rc = main(["--config", str(cfg), "run", "relaunch", "-H", HOST, "--yes", *spec,
                   "-e", "aux_layers=[-1,2,30]", "-e", "draft_mismatch=allow", "-e", "mem_fraction=0.85",
                   "-e", 'env={"NCCL_MIN_NCHANNELS": "8", "NCCL_ALGO": "Ring"}',
                   "-e", "extra_args=[--chunked-prefill-size,4096,--schedule-policy,lpm]"])
        assert rc in (0, 3)
        store = Store(sb["db"])
        bad = store.last_run_id()
        capsys.readouterr()
        # through the slash grammar, exactly as `/eagle bisect GOOD BAD HOST` in Slack
        rc = main(["--config", str(cfg), "chat", f"bisect {good} {bad} {HOST} repeats=2"])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert "6 changes" in out
        assert ("culprit: eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58] → [-1, 2, 30]"
                " (alone it reproduces the drop)") in out
        [b] = [s for s in store.db.query("select * from sweeps where kind = 'bisect'")]
        points = list(store.db.query("select * from sweep_points where sweep_id = $1", [b["id"]]))
        assert len(points) <= bound(6) == 5
        assert "left in GOOD's configuration" in out
        # every point and the final relaunch is an audited run of the bisect-point playbook
        runs = [r for r in store.history(limit=100) if r["playbook"] == "bisect-point"]
        assert len(runs) == len(points) + 1 and all(r["status"] == "succeeded" for r in runs)
        [parent] = [r for r in store.history(limit=100) if r["playbook"] == "bisect"]   # their parent (issue 42)
        assert {r["parent_run_id"] for r in runs} == {parent["id"]} and parent["status"] == "succeeded"
        draft_cfg = json.loads((sb["draft"] / "config.json").read_text())
        assert draft_cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
        # the bisect's rows (sweeps, sweep_points, runs) are chained: the audit chain is intact
        assert main(["--config", str(cfg), "audit", "verify"]) == 0, capsys.readouterr().out
        assert store.db.execute("select count(*) from audit_chain where tbl = 'sweep_points'").fetchone()[0] >= 2


@pytest.mark.parametrize("text,why", [
    ("bisect 1 2", "usage: /eagle bisect GOOD BAD HOST"),
    ("bisect 1 2 gpu-01 leave=maybe", "usage: /eagle bisect GOOD BAD HOST"),
    ("sweep relaunch", "usage: /eagle sweep PLAYBOOK HOST"),
    ("sweep relaunch local spec_steps", "usage: /eagle sweep PLAYBOOK HOST"),
])
def test_bad_tuning_commands_are_one_sentence(tmp_path, capsys, text, why):
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text("audit_db: eagle.db\n")
    assert main(["chat", text, "--config", str(cfg)]) == 2
    assert why in capsys.readouterr().err
