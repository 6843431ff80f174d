"""The lossless check (`bench.correctness` in the shipped `bench` playbook) on the SIMULATED
SGLang server: real processes, real HTTP, real greedy requests; the simulator's target gives
each prompt a fixed greedy output and a lossy draft (EAGLE_SIM_LOSSY_DRAFT) changes some."""
from __future__ import annotations

import json

import yaml
from tuning_sandbox import HOST, sim_host

from eaglebot.frontends.cli.main import main
from eaglebot.store import Store

PLAIN = {
    "name": "plain-launch",
    "description": "the target alone, no speculative decoding",
    "vars": {"python": "python3"},
    "steps": [
        {"skill": "server.stop", "with": {"port": "{{ port }}"}},
        {"skill": "server.launch", "with": {"python": "{{ python }}", "model": "{{ model }}", "port": "{{ port }}"}},
    ],
}
BENCH = ["-e", "num_prompts=8", "-e", "output_len=32", "-e", "input_len=64", "-e", "health=false",
         "-e", "correctness_prompts=16"]


def eagle(cfg, capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["--config", str(cfg), *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def step(doc: dict, name: str) -> dict:
    [s] = [s for s in doc["steps"] if s["name"] == name]
    return s


def test_the_reference_is_recorded_once_a_faithful_draft_passes_and_a_lossy_one_fails(tmp_path, capsys):
    with sim_host(tmp_path) as sb:
        cfg = sb["cfg"]
        plain = tmp_path / "plain-launch.yaml"
        plain.write_text(yaml.safe_dump(PLAIN))
        refs = sb["state"] / "correctness"
        # 1. the target alone: the bench's lossless step records the reference ...
        assert eagle(cfg, capsys, "run", str(plain), "-H", HOST, "--yes")[0] == 0
        rc, doc = eagle(cfg, capsys, "run", "bench", "-H", HOST, *BENCH)
        assert rc == 0, doc
        s = step(doc, "lossless check")
        assert s["status"] == "changed" and "recorded the greedy reference" in s["summary"]
        [ref] = list(refs.glob("reference-*.json"))
        recorded = json.loads(ref.read_text())
        assert recorded["run_id"] == doc["run_id"] and len(recorded["outputs"]) == 16
        # ... once: a second plain bench reuses it
        rc, doc = eagle(cfg, capsys, "run", "bench", "-H", HOST, *BENCH)
        s = step(doc, "lossless check")
        assert rc == 0 and s["status"] == "ok" and f"recorded by run #{recorded['run_id']}) is kept" in s["summary"]
        assert list(refs.glob("reference-*.json")) == [ref] and json.loads(ref.read_text()) == recorded
        # 2. EAGLE-3 with a faithful draft: every greedy output matches; the rate is a metric
        assert eagle(cfg, capsys, "run", "relaunch", "-H", HOST, "--yes", "-e", "bench_prompts=0")[0] == 0
        rc, doc = eagle(cfg, capsys, "run", "bench", "-H", HOST, *BENCH)
        s = step(doc, "lossless check")
        assert rc == 0 and s["status"] == "ok", s
        assert s["summary"].startswith("lossless: 16/16 greedy outputs match the reference (100.0%")
        assert {m["name"]: m["value"] for m in doc["metrics"]}["greedy_match_rate"] == 1.0
        [m] = [m for m in doc["metrics"] if m["name"] == "greedy_match_rate"]
        assert m["better"] == "higher"
        # 3. a lossy draft: the step fails with the match rate and the first differing token
        rc, _ = eagle(cfg, capsys, "run", "relaunch", "-H", HOST, "--yes", "-e", "bench_prompts=0",
                      "-e", 'env={"EAGLE_SIM_LOSSY_DRAFT": "0.5"}')
        assert rc == 0
        rc, doc = eagle(cfg, capsys, "run", "bench", "-H", HOST, *BENCH)
        s = step(doc, "lossless check")
        assert rc == 1 and s["status"] == "failed"
        assert "EAGLE3 changed the greedy outputs: " in s["summary"]
        matched = int(s["summary"].split("greedy outputs: ")[1].split("/")[0])
        assert 0 < matched < 16 and f"/16 greedy outputs match the reference ({matched / 16:.1%}, min_match 95%)" in s["summary"]
        assert "first difference at prompt " in s["summary"] and "(reference) vs " in s["summary"]
        store = Store(sb["db"])
        [row] = [r for r in store.metrics(doc["run_id"]) if r["name"] == "greedy_match_rate"]
        assert row["value"] == round(matched / 16, 4)
