"""`eagle diff A B` and `/eagle diff A B` over runs recorded in a real SQLite file."""
from __future__ import annotations

import json

import jsonpatch
import yaml
from support.history_seed import seed_run

from eaglebot.frontends.cli.main import main
from eaglebot.store import Store
from eaglebot.store.rows import NewRun, StepEnd

ARGS = ["--model-path", "/m", "--speculative-num-steps", "5", "--cuda-graph-bs-decode", "1", "2", "4", "--port", "30000"]


def _seed(tmp_path):
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db"}))
    store = Store(tmp_path / "eagle.db")
    a = seed_run(store, "relaunch", "local", metrics={"output_throughput": 120.0, "accept_length": 3.1},
                 launch={"launch_args": ARGS, "sglang_version": "0.5.23", "env": {"NCCL_MIN_NCHANNELS": "4"}},
                 package_versions={"torch": "2.14.0"})
    key = "eagle_config.eagle_aux_hidden_state_layer_ids"
    rid = store.create_run(NewRun(playbook="relaunch", hosts=["local"], inputs={"aux_layers": [-1, 2, 30]}, variables={},
                           actor="t", origin="cli"))
    sid = store.step_started(rid, 0, "local", "patch", "config.patch", {"path": "/d/config.json",
                                                                       "set": {key: [-1, 2, 30]}})
    store.step_finished(sid, StepEnd(run_id=rid, host="local", status="changed", summary="", duration_ms=1, attempts=1,
                        data={"path": "/d/config.json", "keys": [key],
                              "values": {key: {"before": [2, 30, 58], "after": [-1, 2, 30]}}}))
    new_args = ARGS[:6] + ["8", "16"] + ARGS[8:]
    sid = store.step_started(rid, 1, "local", "launch", "server.launch", {})
    store.step_finished(sid, StepEnd(run_id=rid, host="local", status="changed", summary="", duration_ms=1, attempts=1,
                        data={"launch_args": new_args, "sglang_version": "0.5.23", "env": {"NCCL_MIN_NCHANNELS": "8"}}))
    store.finish_run(rid, "succeeded", exit_code=0)
    b = seed_run(store, "bench", "local", metrics={"output_throughput": 90.0, "accept_length": 2.0},
                 package_versions={"torch": "2.14.1"})
    store.save_vars(b, {"local": {"draft": "/d", "model": "/m"}})
    return cfg, a, b


def test_diff_json_shows_every_kind_of_change_and_metric_deltas(tmp_path, capsys):
    cfg, a, b = _seed(tmp_path)
    assert main(["diff", str(a), str(b), "--json", "--config", str(cfg)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["launch"] == {"--cuda-graph-bs-decode": {"a": ["1", "2", "4"], "b": ["1", "8", "16"]}}
    key = "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert d["config"]["a"] == {"/d/config.json": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}}
    assert d["config"]["b"] == {"/d/config.json": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}}}
    # an RFC 6902 patch (made by jsonpatch) that turns A's config into B's
    # the patch addresses the config document's own structure, not the dotted key
    assert all(op["path"].startswith("/~1d~1config.json/" + key.replace(".", "/")) for op in d["config_patch"])
    assert jsonpatch.apply_patch(d["config"]["a"], d["config_patch"]) == d["config"]["b"]
    assert d["env"] == {"NCCL_MIN_NCHANNELS": {"a": "4", "b": "8"}}
    assert d["versions"] == {"torch": {"a": "2.14.0", "b": "2.14.1"}}
    tput = next(m for m in d["metrics"] if m["name"] == "output_throughput")
    assert (tput["a"], tput["b"], tput["delta_pct"]) == (120.0, 90.0, -25.0)
    assert {c["key"] for c in d["ranked"][:2]} == {key, "--cuda-graph-bs-decode"}     # before env and versions
    assert [c["kind"] for c in d["ranked"][2:]] == ["package", "env"]


def test_slash_diff_is_the_same_text_and_unknown_runs_are_one_sentence(tmp_path, capsys):
    cfg, a, b = _seed(tmp_path)
    assert main(["chat", f"diff {a} {b}", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "launch arguments:" in out and "--cuda-graph-bs-decode" in out and "1 8 16" in out
    # the file as its user knows it (under the host's draft folder), then the key in dotted form;
    # list items by index when the length stayed; no JSON Pointer escapes (those stay in --json)
    assert "config (the RFC 6902 patch is in --json):\n  {draft}/config.json\n" in out
    assert "    eagle_config.eagle_aux_hidden_state_layer_ids[0]: 2 → -1\n" in out
    assert "eagle_config.eagle_aux_hidden_state_layer_ids[2]: 58 → 30" in out
    assert "~1" not in out
    assert "-25.0%" in out
    assert main(["chat", f"diff {a} 999", "--config", str(cfg)]) == 2
    assert "no run #999" in capsys.readouterr().err
    assert main(["chat", "diff 1", "--config", str(cfg)]) == 2


def test_config_files_are_named_by_model_folder_or_home_and_lists_of_new_length_whole():
    from eaglebot.history.diff import config_changes, file_label

    assert file_label("/models/eagle3/sub/config.json", {"draft": "/models/eagle3/"}) == "{draft}/sub/config.json"
    assert file_label("/home/ops/m/config.json", {"draft": "/x"}, home="/home/ops") == "~/m/config.json"
    assert file_label("/srv/config.json", {}, home="/home/ops") == "/srv/config.json"
    ch = config_changes({"/h/c.json": {"a.ids": [2, 30], "a.on": True}}, {"/h/c.json": {"a.ids": [-1, 2, 30]}},
                        {}, {}, home="/h")
    assert ch == [{"file": "/h/c.json", "label": "~/c.json", "key": "a.ids", "a": [2, 30], "b": [-1, 2, 30]},
                  {"file": "/h/c.json", "label": "~/c.json", "key": "a.on", "a": True, "b": None}]
