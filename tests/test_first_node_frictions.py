"""What a new user still tripped on (issue 47), each through the real `eagle` CLI in this process
(tests/support/inproc.py) on a local-transport host: the fix in a draft refusal, dry runs that record no
training evidence, and the small texts."""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.inproc import eagle_here, eagle_here_json

from eaglebot.store import Store, parse_iso
from eaglebot.store.rows import NewRun

EAGLE = str(Path(sys.executable).parent / "eagle")

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
    other = await h.services.store.call(lambda s: s.create_run(NewRun(playbook="x", hosts=["local"], inputs={}, variables={},
                                                     actor="t", origin="cli")))
    await h.services.store.call(lambda s: s.acquire_hosts(other, ["local"]))
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


class Lines:
    """A process's stdout read line by line as it writes, each read waiting for its bytes."""

    def __init__(self, proc: subprocess.Popen):
        self.fd, self.buf = proc.stdout.fileno(), b""

    def until(self, want: str) -> list[str]:
        seen: list[str] = []
        while True:
            while b"\n" not in self.buf:
                ready, _, _ = select.select([self.fd], [], [], 60)
                assert ready, f"no {want!r} in 60 s; got {seen}"
                chunk = os.read(self.fd, 65536)
                assert chunk, f"stdout closed before {want!r}; got {seen}"
                self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            seen.append(line.decode())
            if seen[-1] == want:
                return seen


def test_logs_takes_lines_and_follows_until_interrupted(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(10)))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": str(tmp_path / "eagle.db"),
                                   "hosts": {"box": {"transport": "local", "vars": {"server_log": str(log)}}}}))
    res = eagle_here("logs", "box", "--lines", "3", config=cfg)
    assert res.returncode == 0 and res.stdout.splitlines()[1:] == ["line 7", "line 8", "line 9"], res
    proc = subprocess.Popen([EAGLE, "--config", str(cfg), "logs", "box", "-f", "-n", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    out = Lines(proc)
    try:
        assert out.until("line 9") == [f"== {log}", "line 8", "line 9"]
        with log.open("a") as f:
            f.write("appended later\n")
        assert out.until("appended later") == ["appended later"]
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"cancelled" in stderr, (proc.returncode, stderr)
    assert subprocess.run(["pgrep", "-f", f"tail -F -n 2 -- {log}"], capture_output=True).returncode == 1


def test_a_config_patch_changes_only_the_changed_values_bytes(tmp_path):
    cfg = node(tmp_path)
    draft_cfg = tmp_path / "draft" / "config.json"
    # a hand-laid-out file: aligned colons, a one-line object, a list over several lines
    text = ('{\n  "architectures": ["LlamaForCausalLMEagle3"],\n  "eagle_config": {\n'
            '    "eagle_aux_hidden_state_layer_ids": [2, 30, 58],\n    "use_aux_hidden_state": true\n  },\n'
            '  "hidden_size":     7168,\n  "rope_scaling": {"factor": 8.0, "type": "llama3"},\n'
            '  "stop": [\n    1,\n    2\n  ],\n  "vocab_size": 129280\n}\n')
    draft_cfg.write_text(text)
    res, doc = eagle_here_json("run", "patch-config", "-H", "gpu-01", "-e", "aux_layers=3,31,59",
                               "-e", 'set={"rope_scaling.factor": 4.0, "stop": [7, 8, 9]}', config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    assert draft_cfg.read_text() == (text.replace("[2, 30, 58]", "[3, 31, 59]").replace('"factor": 8.0', '"factor": 4.0')
                                     .replace('"stop": [\n    1,\n    2\n  ]', '"stop": [\n    7,\n    8,\n    9\n  ]'))
    diff = next(s for s in doc["steps"] if s["name"] == "patch capture layers")["data"]["diff"]
    changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed == ['-    "eagle_aux_hidden_state_layer_ids": [2, 30, 58],',
                       '+    "eagle_aux_hidden_state_layer_ids": [3, 31, 59],'], diff


@pytest.fixture
def figures(monkeypatch):
    """Every matplotlib figure the CLI saves, drawn, for what its texts say."""
    from matplotlib.figure import Figure

    saved: list = []
    real = Figure.savefig

    def savefig(self, *a, **kw):
        saved.append(self)
        return real(self, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


def texts(fig) -> list[str]:
    fig.canvas.draw()
    out = [t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text"))]
    for ax in fig.axes:
        out += [t.get_text() for t in (*ax.get_xticklabels(which="both"), *ax.get_yticklabels(which="both"))]
    return out


def test_the_trend_marks_each_runs_id(tmp_path, figures):
    from support.history_seed import seed_run

    cfg = node(tmp_path)
    store = Store(tmp_path / "eagle.db")
    ids = [seed_run(store, "relaunch", "gpu-01", metrics={"output_throughput": v}) for v in (90.0, 91.5, 54.8)]
    store.close()
    res = eagle_here("trend", "relaunch", "gpu-01", "output_throughput", "--out", str(tmp_path / "t.png"),
                     config=cfg)
    assert res.returncode == 0 and (tmp_path / "t.png").stat().st_size > 5000, res
    shown = texts(figures[-1])
    assert all(f"#{i}" in shown for i in ids), shown


def test_the_tune_plot_labels_a_narrow_log_axis_in_plain_numbers_and_says_an_83_cell_grid(tmp_path, figures):
    from eaglebot.frontends.tuning.tune_plot import render_tune

    cells = [{"spec_steps": s, "spec_topk": 1, "spec_draft_tokens": s + 1, "tok_s": t, "predicted_tok_s": t * 1.02}
             for s, t in ((2, 120.0), (3, 140.0), (4, 155.0))]
    r = {"run_id": 7, "playbook": "relaunch", "host": "gpu-01", "launches": 9, "grid_launches": 83,
         "prediction_checks": {"checked": 3, "within_5pct": 3},
         "batch_sizes": {"1": {"measured": cells, "tok_s": 155.0, "choice": cells[2]}}}
    render_tune(r, tmp_path / "tune.png")
    shown = texts(figures[-1])
    assert any("9 launches of an 83-cell grid" in t for t in shown), shown
    ticks = [t for t in shown if t and t.replace(".", "").isdigit()]
    assert ticks and not any("times" in t or "^" in t for t in shown), shown


def test_sweep_out_with_one_axis_draws_a_line_plot(tmp_path, figures):
    pbdir = tmp_path / "playbooks"
    pbdir.mkdir()
    (pbdir / "fake.yaml").write_text(yaml.safe_dump({
        "name": "fake", "description": "a benchmark's metrics from an input", "inputs": {"x": {"type": "int"}},
        "steps": [{"skill": "metric.record", "with": {"name": "output_throughput", "value": "{{ 100 + x * 10 }}"}},
                  {"skill": "metric.record", "with": {"name": "median_ttft_ms", "value": "{{ 50 - x }}",
                                                      "better": "lower"}}]}))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": str(tmp_path / "eagle.db"), "playbooks_dir": str(pbdir)}))
    out = tmp_path / "one.png"
    res = eagle_here("sweep", "fake", "-H", "local", "x=1,2,3", "--out", str(out), config=cfg, cwd=tmp_path)
    assert res.returncode == 0 and out.stat().st_size > 5000, res
    assert f"line plot and Pareto front: {out}" in res.stdout
    shown = texts(figures[-1])
    assert {"110", "120", "130"} <= set(shown) and "best output tok/s per value (higher is better)" in shown, shown


def test_the_tune_table_has_no_column_that_repeats_the_heads_counts():
    from eaglebot.frontends.tuning.tune_text import tune_text

    choice = {"spec_steps": 3, "spec_topk": 1, "spec_draft_tokens": 4}
    entry = {"choice": choice, "tok_s": 140.0, "spread": 1.0, "cells_measured": 10, "cells_predicted": 8}
    r = {"run_id": 7, "playbook": "relaunch", "host": "gpu-01", "grid_launches": 83, "cells_measured": 10,
         "cells_predicted": 8, "launches": 9, "seconds": 120.0, "noise_pct": 1.2, "stopped": "budget",
         "budget": {"max_launches": 9}, "batch_sizes": {"1": entry, "8": {**entry, "tok_s": 600.0}}}
    text = tune_text(r)
    assert "an 83-cell grid (10 cells measured, 8 chains predicted)" in text and "10/8" not in text, text
    r["batch_sizes"]["8"]["cells_measured"] = 6      # where the sizes differ, the column says so
    assert "cells measured/chains predicted" in tune_text(r) and "6/8" in tune_text(r)


def test_history_json_carries_dry_run_duration_and_the_key_metric(tmp_path):
    cfg = node(tmp_path)
    book = tmp_path / "measure.yaml"
    book.write_text(yaml.safe_dump({"name": "measure", "steps": [
        {"skill": "metric.record", "with": {"name": "median_ttft_ms", "value": 30.5, "unit": "ms", "better": "lower"}},
        {"skill": "metric.record", "with": {"name": "output_throughput", "value": 5480.0, "unit": "tok/s"}}]}))
    assert eagle_here("run", str(book), "-H", "gpu-01", config=cfg).returncode == 0
    assert eagle_here("run", str(book), "-H", "gpu-01", "--dry-run", config=cfg).returncode == 0
    res, doc = eagle_here_json("history", config=cfg)
    assert res.returncode == 0, res.stderr
    dry, real = doc   # newest first
    assert (real["dry_run"], dry["dry_run"]) == (False, True)
    assert real["key_metric"] == {"host": "gpu-01", "name": "output_throughput", "value": 5480.0, "unit": "tok/s"}
    assert dry["key_metric"] is None and real["regressions"] == 0   # a dry run records no metric
    store = Store(tmp_path / "eagle.db")
    row = store.get_run(real["run_id"])
    store.close()
    took = parse_iso(row["finished_at"]) - parse_iso(row["started_at"])
    assert real["duration_ms"] == round(took.total_seconds() * 1000) and isinstance(real["duration_ms"], int)


async def test_a_heartbeat_on_a_busy_host_posts_once_in_slack_with_slacks_date_and_logs_each_skip(
        harness, fake, caplog):
    import logging
    from datetime import datetime, timedelta, timezone

    from eaglebot.frontends.service.scheduler import build_scheduler

    beat = {"name": "heartbeat", "playbook": "hello", "hosts": ["local"], "every": "30s", "channel": "C0HEART"}
    h = await harness(schedules=[beat])
    run = NewRun(playbook="relaunch", hosts=["local"], inputs={}, variables={}, actor="t", origin="slack")
    holder = await h.services.store.call(lambda s: s.create_run(run))
    await h.services.store.call(lambda s: s.acquire_hosts(holder, ["local"]))   # e.g. a relaunch waiting for its approval
    sched = build_scheduler(h.services, h.bot.hooks)
    [cfg] = h.services.settings.schedules
    now = datetime.now(timezone.utc)
    with caplog.at_level(logging.INFO, logger="eaglebot.scheduler"):
        for i in range(3):   # three fires while the host stays held
            assert await sched.run_schedule(cfg, now + timedelta(seconds=30 * i)) is None
    posts = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                         if "did not start" in c.all_text()])
    [post] = posts
    text = post.all_text()
    assert post.args.get("channel") == "C0HEART" and f"busy with run #{holder}" in text, text
    assert re.search(r"since <!date\^\d+\^\{date_short_pretty\} \{time\}\|[^>]+>", text), text   # Slack's own dates
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", text), text                            # no raw ISO time
    skipped = [r.getMessage() for r in caplog.records if "did not start" in r.getMessage()]
    assert len(skipped) == 3 and all(f"run #{holder}" in m for m in skipped), skipped
    fires = await h.query("select status from schedule_fires where schedule = 'heartbeat'")
    assert [f["status"] for f in fires] == ["busy"] * 3
