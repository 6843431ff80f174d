"""`eagle tune` end to end on the SIMULATED SGLang server (local transport): every cell is a real
relaunch (a real process, real HTTP) and real bench_serving runs at each batch size; only the
numbers come from the simulator (its batch-size-blind model, or with EAGLE_SIM_LANDSCAPE the
per-batch-size landscape), with seeded noise. The flap test replays real concurrency against the
server's adaptive steps, which run SGLang's own tier rule."""
from __future__ import annotations

import json
import sqlite3

import pytest
from support.helpers import eagle, eagle_json
from support.inproc import eagle_here
from support.tuning_sandbox import HOST, sim_host

SMALL = ["--repeats", "2", "--prompts", "8", "--output-len", "64"]


@pytest.mark.e2e  # a whole tuning run on the simulator
def test_tune_reports_each_batch_size_measured_and_predicted_in_a_fifth_of_the_grid(tmp_path):
    with sim_host(tmp_path) as sb:
        res, out = eagle_json("tune", "relaunch", "-H", HOST, "--batch-sizes", "1,8,32", *SMALL, config=sb["cfg"],
                              cwd=tmp_path, timeout=900)
        assert res.returncode == 0, res.stderr[-3000:]
        assert out["grid_launches"] == 83 and 3 <= out["launches"] <= 83 // 5
        assert set(out["batch_sizes"]) == {"1", "8", "32"}
        for b, e in out["batch_sizes"].items():
            assert set(e["choice"]) == {"spec_steps", "spec_topk", "spec_draft_tokens"}
            assert e["tok_s"] > 0 and e["spread"] >= 0
            best = max(c["tok_s"] for c in e["measured"])
            assert e["tok_s"] == best and {k: e["choice"][k] for k in e["choice"]} in [
                {k: c[k] for k in e["choice"]} for c in e["measured"] if c["tok_s"] == best]
            assert len(e["predicted"]) == 8 and all(c["spec_topk"] == 1 for c in e["predicted"])
            assert len(e["measured"]) == out["cells_measured"] >= 4
        assert out["deploy"]["mode"] == "static" and out["simulated"] is True
        assert out["prediction_checks"]["within_5pct"] >= 0.9 * out["prediction_checks"]["checked"] > 0
        assert (tmp_path / f"tune-{out['run_id']}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # `eagle show` of the tuning run lists every cell measured, with the runs that measured it
        res, shown = eagle_json("show", str(out["run_id"]), config=sb["cfg"])
        assert res.returncode == 0 and shown["status"] == "succeeded"
        cells = [s for s in shown["steps"] if s["skill"] == "tune.cell"]
        assert len(cells) == out["cells_measured"] == out["launches"]
        labels = {f"steps={c['spec_steps']} topk={c['spec_topk']} draft={c['spec_draft_tokens']}"
                  for c in out["batch_sizes"]["8"]["measured"]}
        assert {s["summary"].split(":")[0] for s in cells} == labels
        assert all("tok/s" in s["summary"] and "(runs #" in s["summary"] for s in cells)
        text = eagle("show", str(out["run_id"]), config=sb["cfg"]).stdout
        assert all(label in text for label in labels)
        db = sqlite3.connect(sb["db"])
        kind, spec = db.execute("select kind, spec from sweeps").fetchone()
        assert kind == "tune" and json.loads(spec)["batch_sizes"] == [1, 8, 32]
        children = db.execute("select playbook, count(*) from runs where playbook != 'tune' group by playbook").fetchall()
        assert dict(children) == {"relaunch": out["launches"], "tune-measure": out["launches"] + 1}
        # `eagle history`: one row for the tune, its runs counted (issue 42); --all and show list them
        n_children = 2 * out["launches"] + 1
        res, hist = eagle_json("history", config=sb["cfg"])
        assert [(h["run_id"], h["children"]) for h in hist] == [(out["run_id"], n_children)]
        assert f"succeeded +{n_children} runs" in eagle("history", config=sb["cfg"]).stdout
        res, every = eagle_json("history", "--all", "--limit", "500", config=sb["cfg"])
        assert len(every) == n_children + 1 and {h["parent_run_id"] for h in every} == {None, out["run_id"]}
        assert len(shown["children"]) == n_children and f"runs it started ({n_children}):" in text


def test_tune_refuses_bad_input_with_one_sentence_and_an_audit_row(tmp_path):
    with sim_host(tmp_path) as sb:
        for argv, words in [(["--batch-sizes", "1,0"], "must be from 1 to 4096"),
                            (["--budget", "soon"], "--budget expects a duration"),
                            (["-e", "spec_steps=3"], "is what eagle tune chooses"),
                            (["--steps", "1-40"], "--steps must be from 1 to 16")]:
            res = eagle_here("tune", "relaunch", "-H", HOST, *argv, config=sb["cfg"])
            assert res.returncode == 2 and words in res.stderr, (argv, res.stderr)
        res = eagle_here("tune", "bench", "-H", HOST, config=sb["cfg"])
        assert res.returncode == 2 and "has no input spec_steps" in res.stderr
        db = sqlite3.connect(sb["db"])
        reasons = [r for (r,) in db.execute("select reason from events where kind = 'rejected'")]
        assert any("has no input spec_steps" in r for r in reasons)
        assert db.execute("select count(*) from runs").fetchone()[0] == 0


@pytest.fixture
def landscape(monkeypatch):
    monkeypatch.setenv("EAGLE_SIM_LANDSCAPE", "3")


FLAPPY = {"1": {"candidate_steps": [3, 5], "down_hysteresis": 0.0}, "8": {"candidate_steps": [3]}}


@pytest.mark.e2e  # a whole tuning run on the simulator
def test_the_flap_test_rejects_a_config_that_flaps_and_names_the_phase(tmp_path, landscape):
    with sim_host(tmp_path) as sb:
        res, out = eagle_json("run", "relaunch", "-H", HOST, "--yes", "-e", "spec_steps=3", "-e", "spec_topk=1",
                              "-e", "spec_draft_tokens=4", "-e", "bench_prompts=0", "-e",
                              f"spec_adaptive={json.dumps(FLAPPY)}", config=sb["cfg"])
        assert res.returncode == 0, res.stderr[-2000:]
        launch = next(s for s in out["steps"] if s["name"] == "launch SGLang")
        assert "steps=3 topk=1 draft_tokens=4" in launch["summary"]
        res, out = eagle_json("run", "tune-flap", "-H", HOST, "-e", "trace=1:4,8:3", "-e", "settle_s=1",
                              config=sb["cfg"], timeout=300)
        assert res.returncode == 1
        step = out["steps"][0]
        assert step["status"] == "failed" and step["summary"].startswith("flapping: ")
        assert "at concurrency 1 (between steps 3, 5; more than once per 10 s)" in step["summary"]
        logs = list((sb["state"] / "logs").glob("server-*.log"))
        assert any("Adaptive spec params updated: steps 3 -> 5" in p.read_text() for p in logs)


@pytest.mark.e2e  # a whole tuning run on the simulator
def test_tune_deploys_adaptive_steps_that_pass_the_flap_test_after_an_approval(tmp_path, landscape):
    with sim_host(tmp_path) as sb:
        res, out = eagle_json("tune", "relaunch", "-H", HOST, "--batch-sizes", "1,8,64", "--topk", "1", *SMALL,
                              "--flap-trace", "1:4,64:4,4:4", "--flap-settle", "1.5", "--apply", "--yes",
                              config=sb["cfg"], cwd=tmp_path, timeout=900)
        assert res.returncode == 0, res.stderr[-3000:]
        d = out["deploy"]
        assert d["mode"] == "adaptive" and d["rejected"] == [], (d["why"], d["rejected"], out["static_best"], {
            b: (e["choice"], e["tok_s"]) for b, e in out["batch_sizes"].items()})
        tops = {b: e["choice"]["spec_steps"] for b, e in out["batch_sizes"].items()}
        assert len(set(tops.values())) >= 2
        assert {b: d["adaptive_config"][str(d["slots"][b])]["candidate_steps"][-1] for b in tops} == tops
        assert d["slots"] == {"1": 1, "8": 3, "64": 23}       # keyed between the sizes: a wavering batch stays
        assert out["launches"] == out["search_launches"] + 1          # the flap test's launch
        applied = out["applied"]
        assert applied["ok"] and applied["inputs"]["spec_adaptive"] == d["adaptive_config"]
        assert "(--yes)" in applied["approved_by"]
        db = sqlite3.connect(sb["db"])
        status, who = db.execute("select status, decided_by from approvals where run_id = ?",
                                 [out["run_id"]]).fetchone()
        assert status == "approved" and "(--yes)" in who
        res, flap = eagle_json("show", str(out["run_id"]), config=sb["cfg"])
        steps = {s["skill"]: s for s in flap["steps"]}
        assert steps["tune.flap"]["status"] == "ok" and steps["tune.apply"]["status"] == "changed"
        res, last = eagle_json("show", str(applied["run_id"]), config=sb["cfg"])
        launch = next(s for s in last["steps"] if s["name"] == "launch SGLang")
        assert launch["status"] == "changed"
        cfg_files = list((sb["state"] / "tune").glob(f"adaptive-*-run{applied['run_id']}.json"))
        assert len(cfg_files) == 1 and json.loads(cfg_files[0].read_text()) == d["adaptive_config"]
