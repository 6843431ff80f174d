"""The tuner's deployable result survives its trip through the sweeps row: what `eagle tune`
stores is what `eagle tune apply RUN` deploys (tuning/records.py DeployJson)."""
from __future__ import annotations

import json

from eaglebot.tuning.tune_report import Deploy


def test_a_stored_deploy_reads_back_as_the_same_launch():
    adaptive = Deploy("adaptive", (3, 1, 4), {"batch_size_slots": {"1": 5, "64": 2}}, {1: 210.456, 64: 1890.5},
                      "adaptive beats the best static config by 6.1% on average", slots={1: 5, 64: 2})
    stored = json.loads(json.dumps(adaptive.as_json()))          # as the sweeps row keeps it
    back = Deploy.from_json(stored)
    assert (back.mode, back.cell, back.adaptive_config, back.why) == (
        "adaptive", (3, 1, 4), {"batch_size_slots": {"1": 5, "64": 2}}, adaptive.why)
    assert back.expected == {1: 210.46, 64: 1890.5} and back.inputs() == adaptive.inputs()
