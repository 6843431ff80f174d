"""What a measuring relaunch carries from the running server (src/eaglebot/skills/lib/carry.py), decided without a
host: the audited launch's own flags, the live /server_info's value where the two differ (named),
the live settings alone when nothing was audited."""
from __future__ import annotations

from eaglebot.skills.lib import carry

RECORD = {"run_id": 7, "port": 30000, "env": {"NCCL_MIN_NCHANNELS": "8", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
          "launch_args": ["--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                          "/d", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                          "--speculative-num-draft-tokens", "8", "--tp-size", "4", "--host", "127.0.0.1", "--port",
                          "30000", "--cuda-graph-max-bs", "64"],
          "effective": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 4,
                        "speculative_num_draft_tokens": 8}}
LIVE = {"tp_size": 4, "dp_size": 1, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
        "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8, "mem_fraction_static": 0.88}


def test_the_audited_launch_is_carried_whole_when_the_live_server_confirms_it():
    c = carry.from_sources(RECORD, LIVE, 30000)
    assert c.differences == [] and c.run_id == 7
    assert c.values == {"tp": 4, "spec_steps": 3, "spec_topk": 4, "spec_draft_tokens": 8}
    assert c.args == ["--cuda-graph-max-bs", "64"] and c.gpus == "0,1,2,3" and c.env == {"NCCL_MIN_NCHANNELS": "8"}
    # a flag given by the relaunch replaces the carried one
    assert carry.merge_args(c.args, ["--cuda-graph-max-bs", "128"]) == ["--cuda-graph-max-bs", "128"]


def test_a_live_server_that_differs_from_its_audit_is_named_and_its_live_value_carried():
    c = carry.from_sources(RECORD, {**LIVE, "tp_size": 8, "speculative_eagle_topk": 1}, 30000)
    assert c.differences == ["tp_size: 4 in run #7's audited launch, 8 on the live server",
                             "speculative_eagle_topk: 4 in run #7's audited launch, 1 on the live server"]
    assert c.values["tp"] == 8 and c.values["spec_topk"] == 1


def test_without_an_audited_launch_the_live_settings_are_carried_and_without_either_nothing():
    c = carry.from_sources(None, {**LIVE, "dp_size": 2}, 30000)
    assert c.values == {"tp": 4, "spec_steps": 3, "spec_topk": 4, "spec_draft_tokens": 8, "mem_fraction": 0.88}
    assert c.args == ["--dp-size", "2"] and "no audited launch on port 30000" in c.source
    none = carry.from_sources(None, None, 30000)
    assert none.values == {} and none.notes == ["no audited launch on port 30000 and nothing answers there: "
                                                "nothing carried"]
