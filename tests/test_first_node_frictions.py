"""What a new user still tripped on (issue 47), each through the real `eagle` CLI in this process
(tests/inproc.py) on a local-transport host: the fix in a draft refusal, dry runs that record no
training evidence, and the small texts."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from inproc import eagle_here, eagle_here_json

from eaglebot.store import Store, parse_iso
from eaglebot.store.rows import NewRun

# DeepSeek-V3's config.json (61 layers) and an EAGLE-3 draft for it whose capture ids [2, 30, 58] are
# the layer OUTPUTS its training used: SGLang reads ids as boundaries, so it feeds outputs 1, 29, 57.
TARGET = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
          "hidden_size": 7168, "vocab_size": 129280}
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 7168,
         "num_hidden_layers": 1, "vocab_size": 129280, "draft_vocab_size": 32000,
         "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}


def node(tmp_path: Path, **vars_: object) -> Path:
    """A config with one local-transport host whose model and draft are folders of config files."""
    for name, doc in (("target", TARGET), ("draft", DRAFT)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "config.json").write_text(json.dumps(doc))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({
        "audit_db": str(tmp_path / "eagle.db"), "state_dir": str(tmp_path / "state"),
        "hosts": {"gpu-01": {"transport": "local", "vars": {"model": str(tmp_path / "target"),
                                                              "draft": str(tmp_path / "draft"), **vars_}}}}))
    return cfg


def check_step(doc: dict) -> dict:
    return next(s for s in doc["steps"] if s["skill"] == "draft.check")


def test_a_draft_mismatch_names_the_capture_list_that_fixes_it(tmp_path):
    cfg = node(tmp_path)
    res, doc = eagle_here_json("run", "draft-check", "-H", "gpu-01", "-e", "draft_train_layers=2,30,58",
                               config=cfg)
    assert res.returncode == 2, res.stdout + res.stderr
    s = check_step(doc)
    assert s["data"]["fix_ids"] == [3, 31, 59], s
    assert s["summary"].startswith("mismatch: the server will feed the draft the outputs of layers 1, 29 and 57; "
                                   "training used the outputs of layers 2, 30 and 58 (declared); to fix it: "
                                   "-e aux_layers=[3,31,59] (the capture list that feeds the draft the outputs of "
                                   "layers 2, 30 and 58), or run draft-repair"), s["summary"]
    # draft-check stops nothing: no "refused before anything was stopped" there
    assert "refused before" not in s["summary"] and "-e draft_mismatch=allow reports it as a warning" in s["summary"]
    # the fix it names passes
    res, doc = eagle_here_json("run", "draft-check", "-H", "gpu-01", "-e", "draft_train_layers=2,30,58",
                               "-e", "aux_layers=[3,31,59]", config=cfg)
    assert res.returncode == 0 and check_step(doc)["data"]["verdict"] == "ok", check_step(doc)


def test_a_dry_run_records_no_first_sight_and_an_ok_on_a_first_sight_says_so(tmp_path):
    cfg = node(tmp_path)
    # a dry run sees the draft first: nothing recorded, so the next real run is still the first sight
    res, doc = eagle_here_json("run", "draft-check", "-H", "gpu-01", "--dry-run", config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    res, doc = eagle_here_json("run", "draft-check", "-H", "gpu-01", config=cfg)
    s = check_step(doc)
    assert s["data"]["verdict"] == "unknown" and "first sight of this draft" in s["summary"], s
    first = doc["run_id"]
    # the next check rests on that sighting only, and says so
    res, doc = eagle_here_json("run", "draft-check", "-H", "gpu-01", config=cfg)
    s = check_step(doc)
    assert s["data"]["verdict"] == "ok" and f"(first seen in run {first})" in s["summary"], s
    assert s["summary"].endswith("it rests on the bot's first sight of this draft only, not on what training "
                                 "declared (declare draft_train_layers to be sure)"), s["summary"]


async def test_slack_names_the_fix_in_slack_words(harness, fake, tmp_path):
    node(tmp_path)   # the model and draft folders
    local = {"transport": "local", "vars": {"model": str(tmp_path / "target"), "draft": str(tmp_path / "draft")}}
    h = await harness(hosts={"local": local})
    await h.command("draft-check local draft_train_layers=[2,30,58]")
    run = await h.wait_run(await h.last_run_id())
    assert run["status"] == "failed", run
    summary = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                           if c.args.get("thread_ts") and "mismatch" in c.all_text()])
    text = summary[0].all_text()
    assert "to fix it: aux_layers=[3,31,59]" in text and "draft_mismatch=allow reports it" in text, text
    assert "-e " not in text, text


def test_a_dry_run_past_a_refused_launch_check_skips_the_launch_naming_the_check(tmp_path):
    cfg = node(tmp_path)
    res, doc = eagle_here_json("run", "relaunch", "-H", "gpu-01", "-e", 'extra_args=["--host","0.0.0.0"]',
                               "--dry-run", config=cfg)
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["check the launch"]["status"] == "failed" and "-e bind=" in steps["check the launch"]["summary"]
    launch = steps["launch SGLang"]
    assert launch["status"] == "skipped", launch
    assert launch["summary"] == "dry run: 'check the launch' refused (this step uses what it registers)", launch
    assert "undefined" not in res.stdout + res.stderr


async def test_a_busy_host_says_since_when_in_slacks_date_format(harness, fake):
    h = await harness()
    other = await h.services.store.create_run(NewRun(playbook="x", hosts=["local"], inputs={}, variables={},
                                                     actor="t", origin="cli"))
    await h.services.store.acquire_hosts(other, ["local"])
    await h.command("hello local")
    [resp] = await fake.wait_for(lambda: [c for c in h.responses() if "busy" in c.all_text()])
    text = resp.all_text()
    assert re.search(rf"busy with run #{other} since <!date\^\d+\^{{date_short_pretty}} {{time}}\|"
                     rf"\d{{4}}-\d\d-\d\d \d\d:\d\d UTC>", text), text


def test_the_terminal_says_since_when_in_local_time(tmp_path):
    cfg = node(tmp_path)
    store = Store(tmp_path / "eagle.db")
    other = store.create_run(NewRun(playbook="x", hosts=["gpu-01"], inputs={}, variables={}, actor="t",
                                    origin="cli"))
    store.acquire_hosts(other, ["gpu-01"])
    [lock] = store.locks()
    started = parse_iso(store.get_run(other)["started_at"]).astimezone()
    store.close()
    held = parse_iso(lock["acquired_at"]).astimezone()
    res = eagle_here("run", "patch-config", "-H", "gpu-01", "-e", "aux_layers=3,31,59", config=cfg)
    assert res.returncode == 2 and f"since {held:%Y-%m-%d %H:%M:%S %Z} (" in res.stderr, res.stderr
    res = eagle_here("status", config=cfg)
    assert f"{started:%Y-%m-%d %H:%M}" in res.stdout and "(UTC)" not in res.stdout, res.stdout


async def test_slack_advice_is_in_slack_words(harness, fake, tmp_path):
    node(tmp_path)
    local = {"transport": "local", "vars": {"model": str(tmp_path / "target"), "draft": str(tmp_path / "draft")}}
    h = await harness(hosts={"local": local})
    await h.command('relaunch local extra_args=--host,0.0.0.0')
    run = await h.wait_run(await h.last_run_id())
    assert run["status"] == "failed", run
    [summary] = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                             if c.args.get("thread_ts") and "not --host in extra_args" in c.all_text()])
    text = summary.all_text()
    assert "pass the address as `bind=...`" in text and "-e bind" not in text, text


def test_lint_reports_every_error_of_a_file_with_its_suggestion(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsteps:\n"
                   "  - name: first\n    skil: shell\n    with: {command: echo hi}\n"
                   "  - name: second\n    skill: shell\n    with:\n      command: echo there\n      timeout_s: 10\n")
    res = eagle_here("lint", str(bad), config=node(tmp_path))
    assert res.returncode == 2, res
    lines = res.stderr.splitlines()
    assert f"{bad}:4: steps[0].skil: unknown key (did you mean 'skill'?)" in lines, lines
    assert (f"{bad}:10: steps[1].with.timeout_s: unknown key (timeout_s is a step keyword: put it beside "
            f"`skill:`, not under `with:`)") in lines, lines


def test_schedule_list_shows_an_every_30s_fire_to_the_second(tmp_path):
    cfg = node(tmp_path)
    data = yaml.safe_load(cfg.read_text())
    data["schedules"] = [{"name": "beat", "playbook": "draft-check", "hosts": ["gpu-01"], "every": "30s"}]
    cfg.write_text(yaml.safe_dump(data))
    res, rows = eagle_here_json("schedule", "list", config=cfg)
    due = parse_iso(rows[0]["next_fire"])
    res = eagle_here("schedule", "list", config=cfg)
    assert res.returncode == 0 and f"{due:%Y-%m-%d %H:%M:%S}" in res.stdout, res.stdout
