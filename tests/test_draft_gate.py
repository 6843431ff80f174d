"""The draft-contract gate end to end: the real `eagle` CLI, a real OpenSSH sshd on loopback, a
non-root login user and the DEFAULT config (tests/test_shipped_playbooks.py's `home_host`), the
SIMULATED GPU and SGLang on that host, whose draft declares what it was trained on (the outputs
of layers 2, 30 and 58: SIMULATED-training.json, the sim's ground truth) and whose trainer left
SpecForge's provenance file beside it (`<run_id>.best_meta.json`: the training accuracy).

The story of the seeds: a wrong patch to [-1, 2, 30] is refused before the running server is
touched; reverted, the relaunch passes; allowed anyway, the probe names the capture list; the
repair tries candidates as relaunches after an approval and restores or keeps the config.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.helpers import eagle
from test_server_skills import alive, get_health
from test_shipped_playbooks import FAST, open_home_host, run, step, why

from eaglebot.frontends.slack import blocks as bk
from eaglebot.history.view import RunView
from eaglebot.store import Store


@pytest.fixture(scope="module")
def home_host(tmp_path_factory):
    """test_shipped_playbooks's host (a non-root user's real home, the default config), an sshd and a
    user of this module's own: the two modules may run one after the other in the same worker."""
    with open_home_host(f"eaglegate{os.getpid()}", "gate", tmp_path_factory) as host:
        yield host


SPEC = ["-e", "spec_steps=3", "-e", "spec_topk=1", "-e", "spec_draft_tokens=4", "-e", "bench_prompts=0",
        "-e", f"env={FAST}"]
TRAINED = [2, 30, 58]
ACCURACY = [0.747, 0.71, 0.68]


def declare_training(home: Path, uid: int, gid: int) -> None:
    """What the draft learned (the sim's truth) and what its trainer wrote next to it."""
    files = {home / "models" / "draft" / "SIMULATED-training.json":
             {"trained_layer_outputs": TRAINED, "per_position_acc": ACCURACY},
             home / "models" / "llama31-eagle3.best_meta.json":
             {"run_id": "llama31-eagle3", "step": 12000, "score": 2.41, "metric": "eval/simulated_acc_len",
              "metrics": {"eval/avg_acc": ACCURACY[0], "eval/per_position_acc": ACCURACY,
                          "eval/simulated_acc_len": 2.41}}}
    for path, doc in files.items():
        path.write_text(json.dumps(doc))
        os.chown(path, uid, gid)


def server_pid(home: Path, port: int) -> int:
    return int((home / ".eaglebot" / "run" / f"server-{port}.pid").read_text().split()[0])


@pytest.mark.e2e  # a whole relaunch story over a real sshd
def test_a_wrong_capture_patch_is_refused_the_old_server_keeps_serving_and_the_probe_names_it(home_host):
    h = home_host
    h.reset()
    declare_training(h.home, h.pw.pw_uid, h.pw.pw_gid)
    cfg = h.config()
    draft_cfg = h.home / "models" / "draft" / "config.json"
    original = draft_cfg.read_bytes()

    # the first relaunch: the bot sees the draft for the first time (recorded), the probe compares the
    # server's acceptance per position with SpecForge's accuracy
    rc, doc = run(cfg, "relaunch", *SPEC)
    assert rc == 0, why(doc)
    check = step(doc, "check the draft's inputs")
    assert check["data"]["verdict"] == "unknown" and "first sight of this draft" in check["summary"], check
    assert check["data"]["disk_points"] == TRAINED and check["data"]["sglang_version"] == "0.5.23"
    assert "the table captured from the SGLang 0.5.23 wheel" in check["data"]["resolved_by"]
    probe = step(doc, "probe the draft's acceptance")
    assert probe["status"] == "ok" and probe["data"]["verdict"] == "as expected", probe
    assert probe["data"]["accuracy_source"].startswith("provenance ") and probe["data"]["proxy"] == ACCURACY
    first_run = doc["run_id"]
    pid = server_pid(h.home, h.port)

    # patch-config to [-1, 2, 30], then relaunch: refused with exit 2, both lists named, the old server untouched
    rc, doc = run(cfg, "patch-config", "-e", "aux_layers=-1,2,30")
    assert rc == 0, why(doc)
    rc, doc = run(cfg, "relaunch", *SPEC)
    assert rc == 2, why(doc)
    check = step(doc, "check the draft's inputs")
    assert check["status"] == "failed" and check["data"]["verdict"] == "mismatch", check
    assert check["summary"].startswith(
        "mismatch: the server will feed the draft the embedding and the outputs of layers 2 and 30; training used "
        f"the outputs of layers 2, 30 and 58 (first seen in run {first_run})"), check["summary"]
    assert check["data"]["training_source"] == f"first seen in run {first_run}"
    assert [step(doc, n)["status"] for n in ("stop old server", "launch SGLang")] == ["skipped", "skipped"]
    assert alive(pid) and server_pid(h.home, h.port) == pid and get_health(h.port) == 200
    shown = json.loads(eagle("show", str(doc["run_id"]), "--json", config=cfg, cwd=cfg.parent).stdout)
    assert step(shown, "check the draft's inputs")["data"]["verdict"] == "mismatch"

    # the draft-check playbook says the same, on its own, and starts nothing
    rc, doc = run(cfg, "draft-check")
    assert rc == 2 and step(doc, "check the draft's inputs")["data"]["server_points"] == [-1, 2, 30], why(doc)

    # revert-config, then relaunch: passes, draft.check ok
    rc, doc = run(cfg, "revert-config")
    assert rc == 0 and draft_cfg.read_bytes() == original, why(doc)
    rc, doc = run(cfg, "relaunch", *SPEC)
    assert rc == 0, why(doc)
    check = step(doc, "check the draft's inputs")
    assert check["status"] == "ok" and check["data"]["verdict"] == "ok", check
    assert check["summary"] == ("ok: the server will feed the draft the outputs of layers 2, 30 and 58; training used "
                                f"the outputs of layers 2, 30 and 58 (first seen in run {first_run}); it rests on "
                                "the bot's first sight of this draft only, not on what training declared (declare "
                                "draft_train_layers to be sure)")

    trained_run = doc["run_id"]
    own = step(doc, "probe the draft's acceptance")["data"]
    assert own["verdict"] == "as expected" and own["capture_points"] == TRAINED, own

    # a one-off list (each layer one later): refused by the gate; allowed, it still serves well enough to pass
    # the probe's bands (a real trained pair lost 4-10%), so the probe measures it against this draft's own
    # accept length under its trained list, and never says `as expected`
    rc, doc = run(cfg, "relaunch", *SPEC, "-e", "aux_layers=3,31,59")
    assert rc == 2 and step(doc, "check the draft's inputs")["data"]["verdict"] == "mismatch", why(doc)
    rc, doc = run(cfg, "relaunch", *SPEC, "-e", "aux_layers=3,31,59", "-e", "draft_mismatch=allow")
    assert rc == 0, why(doc)
    probe = step(doc, "probe the draft's acceptance")
    d = probe["data"]
    assert d["verdict"] == "measured drop" and d["first"] >= 0.7 * ACCURACY[0], probe
    assert probe["summary"].startswith(f"measured drop: accept length {d['accept_length']:.2f} vs "
                                       f"{own['accept_length']:.2f} with {TRAINED} in run {trained_run} (-"), probe
    assert -0.15 < d["own"]["change"] < -0.03
    assert any(w.startswith("probe the draft's acceptance") or "measured drop" in w for w in doc["warnings"]), doc
    rc, doc = run(cfg, "revert-config")
    assert rc == 0 and draft_cfg.read_bytes() == original, why(doc)

    # the wrong list allowed: the gate warns, the server is relaunched, the probe says `wrong inputs`
    rc, doc = run(cfg, "relaunch", *SPEC, "-e", "aux_layers=-1,2,30", "-e", "draft_mismatch=allow")
    assert rc == 0, why(doc)
    check = step(doc, "check the draft's inputs")
    assert check["status"] == "ok" and check["data"]["verdict"] == "mismatch"
    assert check["summary"].startswith("mismatch (allowed by draft_mismatch=allow): the server will feed the draft "
                                       "the embedding and the outputs of layers 2 and 30")
    probe = step(doc, "probe the draft's acceptance")
    assert probe["status"] == "failed" and probe["data"]["verdict"] == "wrong inputs", probe
    assert probe["summary"].startswith("wrong inputs: position 1 accepted ") and "(training 75%)" in probe["summary"]
    assert ("likely cause: the capture list: the server feeds the draft the embedding and the outputs of layers 2 "
            "and 30, training used the outputs of layers 2, 30 and 58") in probe["summary"]
    assert probe["data"]["first"] < 0.3 and probe["data"]["accept_length"] < 1.3
    assert any("probe the draft's acceptance failed (continue_on_error): wrong inputs" in w for w in doc["warnings"])
    assert json.loads(draft_cfg.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]
    # the Slack thread's summary of this run (the same view, rendered as Block Kit) carries the verdict,
    # the numbers and the cause: in the step line, the failed step's log tail and the warnings
    store = Store(cfg.parent / "eagle.db")
    try:
        text = json.dumps(bk.run_summary_blocks(dict(RunView.load(store, doc["run_id"]).summary())))
    finally:
        store.close()
    assert "wrong inputs: position 1 accepted" in text and "(training 75%)" in text
    assert "likely cause: the capture list: the server feeds the draft the embedding and the outputs of layers 2 and 30" \
        in text and "training used the outputs of layers 2, 30 and 58" in text

    # draft-repair without an approver: nothing is relaunched, nothing patched
    pid = server_pid(h.home, h.port)
    rc, doc = run(cfg, "draft-repair")
    assert rc == 1 and step(doc, "plan the attempts")["status"] == "failed", why(doc)
    assert server_pid(h.home, h.port) == pid and alive(pid)
    assert json.loads(draft_cfg.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]

    # approved: each candidate is a relaunch with its acceptance and tok/s recorded; the best (the training
    # layers) is kept, the final server runs it, and the file is byte for byte the one training wrote
    rc, doc = run(cfg, "draft-repair", "--yes", "-e", f"env={FAST}")
    assert rc == 0, why(doc)
    plan = step(doc, "plan the attempts")["data"]
    assert plan["current"]["points"] == [-1, 2, 30] and plan["attempts"][0]["ids"] == TRAINED
    assert len(plan["attempts"]) == 4
    measured = [step(doc, f"attempt {i}: measure")["data"] for i in range(1, 5)]
    assert measured[0]["verdict"] == "as expected" and all(m["accept_length"] for m in measured)
    choice = step(doc, "choose the best")["data"]
    assert choice["apply"] is True and choice["best"]["ids"] == TRAINED
    assert step(doc, "final: measure")["data"]["verdict"] == "as expected"
    assert draft_cfg.read_bytes() == original
    patches = [s for s in doc["steps"] if s["skill"] == "config.patch" and s["status"] == "changed"]
    # every attempt's diff is in the audit trail, then the restore to this run's start and the approved patch
    assert [s["name"] for s in patches] == [f"attempt {i}: patch the capture list" for i in range(1, 5)] + [
        "keep the best capture list"]
    assert step(doc, "restore the draft's config")["status"] == "changed"
    assert {m["name"] for m in doc["metrics"]} >= {"draft_accept_length", "probe_tok_s"}

    # once more, from the training layers: no candidate beats them, so the config is left as it was
    rc, doc = run(cfg, "draft-repair", "--yes", "-e", f"env={FAST}", "-e", "max_attempts=2")
    # probe_tok_s is wall-clock throughput: on a loaded machine it may fall enough against the first
    # repair's to be flagged (exit 3); a flag on anything else, or any other exit, is a failure
    flagged = {r["metric"] for r in doc.get("regressions", [])}
    assert rc == 0 or (rc == 3 and flagged == {"probe_tok_s"}), why(doc)
    choice = step(doc, "choose the best")
    assert choice["data"]["apply"] is False and "no attempt beat the current capture list" in choice["summary"]
    assert step(doc, "keep the best capture list")["status"] == "skipped"
    assert draft_cfg.read_bytes() == original
    rc, doc = run(cfg, "stop")
    assert rc == 0, why(doc)


def test_a_specforge_checkpoint_beside_the_draft_is_the_training_side(home_host):
    """SpecForge's trainer (scripts/train_eagle3.py, save_checkpoints) writes `epoch_E_step_S/` folders
    with the draft's config.json as training had it, and `<run_id>.best_meta.json` beside them: served
    from the newest, patched by hand, the gate reads what training used from the one before."""
    h = home_host
    h.reset()
    out = h.home / "outputs" / "llama31-eagle3"
    trained = json.loads((h.home / "models" / "draft" / "config.json").read_text())
    for name, ids in (("epoch_8_step_10000", TRAINED), ("epoch_9_step_12000", [3, 31, 59])):
        (out / name).mkdir(parents=True)
        (out / name / "config.json").write_text(json.dumps(
            {**trained, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}}))
        (out / name / "model.safetensors").write_bytes(b"SIMULATED weights " + name.encode())
    (out / "llama31-eagle3.best_meta.json").write_text(json.dumps(
        {"run_id": "llama31-eagle3", "step": 12000, "score": 2.41, "metric": "eval/simulated_acc_len",
         "metrics": {"eval/avg_acc": 0.747, "eval/per_position_acc": ACCURACY}}))
    os.utime(out / "epoch_9_step_12000", None)           # the newest checkpoint: the one served
    for dirpath, _dirs, files in os.walk(h.home / "outputs"):
        for n in [dirpath, *(os.path.join(dirpath, f) for f in files)]:
            os.lchown(n, h.pw.pw_uid, h.pw.pw_gid)
    cfg = h.config()
    rc, doc = run(cfg, "draft-check", "-e", "draft=~/outputs/llama31-eagle3/epoch_9_step_12000")
    check = step(doc, "check the draft's inputs")
    assert rc == 2 and check["data"]["verdict"] == "mismatch", why(doc)
    source = f"provenance {h.home}/outputs/llama31-eagle3/epoch_8_step_10000/config.json"
    assert check["summary"].startswith(
        "mismatch: the server will feed the draft the outputs of layers 3, 31 and 59; training used the outputs of "
        f"layers 2, 30 and 58 ({source})"), check["summary"]
    assert check["data"]["train_accuracy"] == ACCURACY
    assert check["data"]["accuracy_source"] == f"provenance {h.home}/outputs/llama31-eagle3/llama31-eagle3.best_meta.json"
