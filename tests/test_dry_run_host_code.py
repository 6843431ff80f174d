"""A dry run executes nothing of the host's own code (issue 46, LOW): the launch pre-flight does
not have the host's Python import sglang (its parser), and the EAGLE-3 resolution does not
compile and run the model file's `set_eagle3_layers_to_capture`; each says so and answers from
eaglebot's captured tables. The Host double fails the test on any command it was not given."""
from __future__ import annotations

from eaglebot.facts.sglang import release
from eaglebot.facts.spec import eagle3
from eaglebot.skills.lib import draft, launch_check
from eaglebot.testing import Host, context


async def test_the_launch_check_of_a_dry_run_asks_the_captured_table_not_the_hosts_sglang():
    host, log = Host("gpu-01"), []
    verdict = await launch_check.check(context(host, dry_run=True, log=log), "python3",
                                       ["--model-path", "/m", "--tp-size", "1"])
    assert host.commands == []
    assert verdict.kind == "ok" and verdict.source == f"table {release.SGLANG_VERSION}", verdict
    assert any("[dry-run] not run: SGLang's own parser" in line for line in log), log


async def test_the_eagle3_resolution_of_a_dry_run_runs_no_method_of_the_hosts_model_file():
    host, log = Host("gpu-01"), []
    res, note = await draft.resolve(context(host, dry_run=True, log=log), "python3",
                                    eagle3.Target(["LlamaForCausalLM"], 32), [None])
    assert host.commands == []
    assert isinstance(res, eagle3.Resolution) and "a dry run does not run the host's SGLang source" in note, note
    assert any("[dry-run] not run: SGLang's set_eagle3_layers_to_capture" in line for line in log), log
