"""The lossless check (`bench.correctness` in the shipped `bench` playbook) on the SIMULATED
SGLang server: real processes, real HTTP, real greedy requests; the simulator's target gives
each prompt a fixed greedy output with its top-2 logprobs, a faithful draft leaves it but at the
target's own bf16 ties (at the rate a real trained pair measured), a lossy draft
(EAGLE_SIM_LOSSY_DRAFT) or a faked acceptance (SGLANG_SIMULATE_ACC_LEN) breaks clear margins."""
from __future__ import annotations

import json

import yaml
from support.tuning_sandbox import HOST, sim_host

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
        assert len(recorded["top2"]) == 16 and all(len(rows) == 32 for rows in recorded["top2"])
        # 2. EAGLE-3 with a faithful draft: outputs match or diverge where the reference's top-2 tie; the
        # share of both is the metric
        assert eagle(cfg, capsys, "run", "relaunch", "-H", HOST, "--yes", "-e", "bench_prompts=0")[0] == 0
        rc, doc = eagle(cfg, capsys, "run", "bench", "-H", HOST, *BENCH)
        s = step(doc, "lossless check")
        assert rc == 0 and s["status"] == "ok", s
        data = _data(sb["db"], doc["run_id"], "lossless check")
        assert data["ties"] >= 1 and data["lossy"] == 0 and data["matched"] + data["ties"] == 16, data
        assert s["summary"].startswith(f"lossless: {data['matched']}/16 greedy outputs match the reference, "
                                       f"{data['ties']} diverge at a tie (top-2 margin <= 0.125 nats), 0 lossy "
                                       f"(100.0% match or tie, min_match 95%)"), s["summary"]
        for d in data["divergences"]:   # each where the plain server's own top-2 were 0 or 1 bf16 step apart
            row = recorded["top2"][d["prompt"]][d["token"]]
            assert d["kind"] == "tie" and d["margin_nats"] == round(row[1] - row[3], 5) and d["margin_nats"] in (0, 0.0625)
            assert d["got"] == d["runner_up"] == row[2] and d["reference"] == row[0]
        [m] = [m for m in doc["metrics"] if m["name"] == "greedy_match_rate"]
        assert m["value"] == 1.0 and m["better"] == "higher"
        # 3. a lossy draft: the step fails naming the broken margin; ties are not counted against it
        rc, _ = eagle(cfg, capsys, "run", "relaunch", "-H", HOST, "--yes", "-e", "bench_prompts=0",
                      "-e", 'env={"EAGLE_SIM_LOSSY_DRAFT": "0.5"}')
        assert rc == 0
        rc, doc = eagle(cfg, capsys, "run", "bench", "-H", HOST, *BENCH)
        s = step(doc, "lossless check")
        assert rc == 1 and s["status"] == "failed"
        data = _data(sb["db"], doc["run_id"], "lossless check")
        assert 0 < data["lossy"] < 16 and data["unexplained"] == 0, data
        assert s["summary"].startswith(f"EAGLE3 changed the greedy outputs: {data['matched']}/16 greedy outputs match "
                                       f"the reference, {data['ties']} diverge at a tie")
        first = next(d for d in data["divergences"] if d["kind"] == "lossy")
        assert first["margin_nats"] > 0.125
        assert f"; first lossy divergence at prompt {first['prompt']} token {first['token']}: " in s["summary"]
        assert f"top-2 margin {first['margin_nats']:.4g} nats" in s["summary"]
        store = Store(sb["db"])
        [row] = [r for r in store.metrics(doc["run_id"]) if r["name"] == "greedy_match_rate"]
        assert row["value"] == round((data["matched"] + data["ties"]) / 16, 4)
        # 4. a faked acceptance (SGLANG_SIMULATE_ACC_LEN accepts drafts the target rejected): the benchmark
        # would refuse the server, the lossless check alone flags every output lossy
        rc, _ = eagle(cfg, capsys, "run", "relaunch", "-H", HOST, "--yes", "-e", "bench_prompts=0",
                      "-e", 'env={"SGLANG_SIMULATE_ACC_LEN": "3"}', "-e", "lossy=allow")
        assert rc == 0
        rc, doc = eagle(cfg, capsys, "run", "bench", "-H", HOST, *BENCH, "-e", "benchmark=false")
        assert rc == 1 and step(doc, "benchmark")["status"] == "skipped"
        data = _data(sb["db"], doc["run_id"], "lossless check")
        assert data["lossy"] + data["ties"] == 16 and data["lossy"] >= 15, data


def _data(db, run_id: int, name: str) -> dict:
    store = Store(db)
    try:
        [row] = [r for r in store.steps(run_id) if r["name"] == name]
    finally:
        store.close()
    return json.loads(row["data"] or "{}")
