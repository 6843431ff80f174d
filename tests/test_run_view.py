"""One view of a run: the key-metric policy and the run/history views every front end shows."""
from __future__ import annotations

import re


from support.helpers import eagle, eagle_json
from support.history_seed import seed_run

from eaglebot.history.view import KEY_METRIC, RunView, key_metric, load_history
from eaglebot.sdk import Regression
from eaglebot.store import Store
from eaglebot.testing.chat import ChatBot


def metric(name: str, value: float) -> dict:
    return {"name": name, "value": value, "unit": "", "host": "gpu-01"}


def test_key_metric_is_output_throughput_even_when_another_metric_was_recorded_first():
    rows = [metric("median_ttft_ms", 30.0), metric("accept_length", 3.1), metric(KEY_METRIC, 120.0)]
    assert key_metric(rows)["name"] == "output_throughput"


def test_key_metric_falls_back_to_the_first_recorded_metric_and_is_none_without_metrics():
    assert key_metric([metric("median_ttft_ms", 30.0), metric("accept_length", 3.1)])["name"] == "median_ttft_ms"
    assert key_metric([]) is None


def test_show_json_lists_only_regressions_and_prefixes_warnings_with_their_host(tmp_path):
    store = Store(tmp_path / "eagle.db")
    rid = seed_run(store, "bench", "gpu-01", metrics={"median_ttft_ms": 30.0, KEY_METRIC: 80.0})
    store.add_regression(rid, Regression(KEY_METRIC, 80.0, 90.0, -11.1, "below baseline", host="gpu-01"))
    store.add_regression(rid, Regression("median_ttft_ms", 30.0, 40.0, -25.0, "faster", host="gpu-01",
                                         kind="improvement"))
    store.add_warning(rid, "gpu-01", "draft tokens adjusted")
    view = RunView.load(store, rid)
    doc = view.as_json()
    assert set(doc) == {"run_id", "status", "parent_run_id", "children", "steps", "metrics", "warnings", "regressions",
                        "hosts"}
    assert doc["parent_run_id"] is None and doc["children"] == []
    assert [r["metric"] for r in doc["regressions"]] == [KEY_METRIC]
    assert doc["warnings"] == ["gpu-01: draft tokens adjusted"]
    assert doc["metrics"][0] == {"host": "gpu-01", "name": "median_ttft_ms", "value": 30.0, "unit": "",
                                 "better": "higher"}
    assert [r["kind"] for r in view.summary()["regressions"]] == ["regression", "improvement"]
    assert RunView.load(store, 999) is None
    store.close()


# -- the same key metric in every front end -------------------------------------------------------

ROW = re.compile(r"^#(\d+)\s")
KEY = re.compile(r"(\S+=\S+(?: [^\s=]+)?)\s*$")


def key_column(table: str) -> dict[int, str]:
    """Run id -> the `key metric` cell of a history table ('' when the run has none)."""
    out: dict[int, str] = {}
    for line in table.replace("```", "\n").splitlines():
        if m := ROW.match(line.strip()):
            k = KEY.search(line)
            out[int(m.group(1))] = k.group(1) if k else ""
    return out


async def test_cli_chat_and_slack_history_show_the_same_key_metric_for_each_run(tmp_path):
    bot = await ChatBot.open(tmp_path, hosts=["local"])
    try:
        store = bot.services.store.sync
        # The first metric each run records is NOT output_throughput: where the old rules disagreed.
        mixed = seed_run(store, "hello", "local", metrics={"median_ttft_ms": 30.0, KEY_METRIC: 123.5})
        later = seed_run(store, "hello", "local", metrics={"accept_length": 3.25, "median_ttft_ms": 28.0,
                                                           KEY_METRIC: 131.0})
        no_tput = seed_run(store, "hello", "local", metrics={"median_ttft_ms": 25.0, "accept_length": 2.5})
        bare = seed_run(store, "hello", "local")
        expected = {mixed: "output_throughput=124 tok/s", later: "output_throughput=131 tok/s",
                    no_tput: "median_ttft_ms=25", bare: ""}
        cfg = tmp_path / "eagle.yaml"

        res, hist = eagle_json("history", config=cfg)
        assert res.returncode == 0, res.stderr
        assert [r["run_id"] for r in hist] == [bare, no_tput, later, mixed]
        assert all(set(r) == {"run_id", "playbook", "hosts", "status", "actor", "origin", "started_at",
                              "finished_at", "parent_run_id", "children", "dry_run", "duration_ms", "key_metric",
                              "regressions"} for r in hist)     # its shape is a contract (issue 47 added the last four)
        # --json's key metric is the terminal's and Slack's, by the same rule
        assert {r["run_id"]: r["key_metric"]["name"] if r["key_metric"] else None for r in hist} == \
            {mixed: KEY_METRIC, later: KEY_METRIC, no_tput: "median_ttft_ms", bare: None}

        cli = eagle("history", config=cfg)
        chat = eagle("chat", "history", config=cfg)
        assert cli.returncode == 0 and chat.returncode == 0, cli.stderr + chat.stderr

        [reply] = (await bot.say("history")).messages
        slack_blocks = "\n".join(b["text"]["text"] for b in reply.blocks if b["type"] == "section")

        assert key_column(cli.stdout) == expected
        assert key_column(chat.stdout) == expected
        assert key_column(slack_blocks) == expected
        assert {r.run_id: r.key_metric["name"] if r.key_metric else None
                for r in load_history(store)} == {mixed: KEY_METRIC, later: KEY_METRIC,
                                                  no_tput: "median_ttft_ms", bare: None}
    finally:
        await bot.close()
