"""The version-drift sentinel (facts/host_programs/sglang_surface.py, facts/sglang/drift.py), in the default run:
the host program over two small committed SGLang trees (tests/fixtures/sglang_surface: the 0.5.17
layout and the 0.5.23 one), the shipped records of the real releases, and the launch pre-flight's
refusal through server.launch. Over the REAL wheels: tests/test_sglang_releases.py (marker e2e)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eaglebot.engine.runner import RunRequest
from eaglebot.facts.sglang import drift
from test_server_skills import PY, Host, one_step, open_svc

TREES = Path(__file__).parent / "fixtures" / "sglang_surface"


def read_tree(name: str) -> dict:
    """The fingerprint as a host gives it: the program on a Python's stdin, the tree as its argument."""
    res = subprocess.run([sys.executable, "-", str(TREES / name / "sglang")], input=drift.program(),
                         capture_output=True, text=True, timeout=60)
    got = drift.parse(res.returncode, res.stdout, res.stderr)
    assert isinstance(got, dict), got
    return got


def test_the_host_program_reads_both_layouts_and_names_each_change():
    old, new = read_tree("old"), read_tree("new")
    # the flag table, wherever the release keeps it, as argparse registers it
    assert old["flags"]["options"] == {
        "--config": "config", "--cuda-graph-max-bs": "cuda_graph_max_bs_decode",
        "--cuda-graph-max-bs-decode": "cuda_graph_max_bs_decode", "--cuda-graph-max-bs-prefill":
        "cuda_graph_max_bs_prefill", "--enable-overlap": "enable_overlap", "--no-enable-overlap": "enable_overlap",
        "--model": "model_path", "--model-path": "model_path", "--speculative-num-steps": "speculative_num_steps"}
    assert old["flags"]["deprecated"] == {"--cuda-graph-max-bs": "--cuda-graph-max-bs-decode"}
    assert set(new["flags"]["where"]) == {"server_args.py", "arg_groups/fields/exec_.py", "arg_groups/fields/model.py"}
    assert old["env"]["retired"] == {"SGLANG_OLD_NAME": {"kind": "renamed", "say": "use SGLANG_NEW_NAME"}}
    assert old["fields"]["per_request"] == ["spec_accept_histogram", "spec_correct_drafts_histogram",
                                            "spec_num_correct_drafts"]
    assert sorted(new["hooks"]) == ["models/glm.py:GlmForCausalLM.set_dflash_layers_to_capture",
                                    "models/llama.py:LlamaForCausalLM.set_eagle3_layers_to_capture",
                                    "models/qwen.py:QwenForCausalLM.set_eagle3_layers_to_capture"]
    d = drift.drift(old, new)
    assert (d.base, d.version) == ("0.1.0", "0.2.0")
    assert d.changes == {
        "flags": ["the flag table moved: server_args.py -> arg_groups/fields/*.py + server_args.py",
                  "--cuda-graph-max-bs removed (now an ambiguous prefix of --cuda-graph-max-bs-decode, "
                  "--cuda-graph-max-bs-prefill; it was a deprecated alias of --cuda-graph-max-bs-decode)",
                  "2 added: --attn-dp-size, --enable-dp-attention",
                  "--enable-dp-attention now deprecated (use --attn-dp-size <dp-size>)",
                  "--enable-dp-attention due for removal after 2026-12-31"],
        "env": ["SGLANG_ENABLE_SPEC_V2, SGLANG_NEW_NAME: read -> ignored (no code reads it)",
                "SGLANG_OLD_NAME: renamed -> ignored (no code reads it)",
                "SGLANG_ENABLE_CP_V2: absent -> removed"],
        "fields": ["server_info enable_dp_attention synthesized (due for removal after 2026-12-31)",
                   "per_request spec_accept_histogram dropped (eaglebot reads it)", "metrics added: spec_num_steps"],
        # llama's hook was only reworded and reformatted: no change; qwen's now takes ids as given
        "hooks": ["1 capture hooks added: models/glm.py:GlmForCausalLM.set_dflash_layers_to_capture",
                  "models/qwen.py:QwenForCausalLM.set_eagle3_layers_to_capture body changed (plus_one differ)"],
        "adaptive": ["built-in defaults: BS1 [1, 3, 7] -> [1, 3, 5, 7]"]}
    # a same-release re-run: no drift
    assert drift.drift(new, read_tree("new")).none
    refusals, warnings = drift.launch_problems(
        new, ["--model-path", "/m", "--cuda-graph-max-bs", "8", "--enable-overlap"],
        {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_SIMULATE_ACC_LEN": "3", "NCCL_DEBUG": "INFO"}, history=[old])
    assert refusals == [
        "--cuda-graph-max-bs is not a flag of SGLang 0.2.0 (removed after 0.1.0): argparse refuses it as an "
        "ambiguous prefix of --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill; use --cuda-graph-max-bs-decode",
        "env SGLANG_ENABLE_SPEC_V2 is silently ignored by SGLang 0.2.0 (no code reads it; SGLang 0.1.0 knew it); "
        "remove it from env:"]
    assert warnings == []


def test_the_shipped_records_hold_every_listed_0517_to_0523_change():
    """REFERENCE.md's wheel diff, each item, from the records eaglebot ships (made from the real wheels)."""
    assert drift.known_versions() == ["0.5.10", "0.5.17", "0.5.23"]
    r17, r23 = drift.record("0.5.17"), drift.record("0.5.23")
    assert r17 is not None and r23 is not None
    lines = drift.drift(r17, r23).lines()
    for want in ["flags: the flag table moved: server_args.py -> arg_groups/fields/*.py + server_args.py",
                 "flags: --cuda-graph-max-bs removed (now an ambiguous prefix of --cuda-graph-max-bs-decode, "
                 "--cuda-graph-max-bs-prefill; it was a deprecated alias of --cuda-graph-max-bs-decode)",
                 "flags: --speculative-dflash-draft-window-size removed (unknown now; it was a deprecated alias of "
                 "--speculative-draft-window-size)",
                 "flags: --piecewise-cuda-graph-max-tokens removed (unknown now; it was a deprecated alias of "
                 "--cuda-graph-max-bs-prefill)",
                 "flags: --speculative-skip-dp-mlp-sync removed (unknown now)",
                 "flags: --enable-dp-attention now deprecated (use --attn-dp-size <dp-size>)",
                 "flags: --enable-dp-attention due for removal after 2026-12-31",
                 "fields: server_info enable_dp_attention synthesized (due for removal after 2026-12-31)",
                 "env: SGLANG_ENABLE_SPEC_V2: removed -> ignored (no code reads it)",
                 "fields: per_request spec_accept_histogram dropped (eaglebot reads it)",
                 "fields: per_request spec_accepted_drafts dropped (eaglebot reads it)",
                 "fields: per_request spec_proposed_drafts dropped (eaglebot reads it)",
                 "adaptive: built-in defaults: BS1 [1, 3, 7] -> [1, 3, 5, 7]",
                 # the MiniMax-M3 flag fix: the hook now sets the per-layer flag its forward reads
                 "hooks: models/minimax_m3.py:MiniMaxM3SparseForCausalLM.set_eagle3_layers_to_capture body "
                 "changed (sets differ)"]:
        assert want in lines, want
    changed = {ln.split(":")[1].strip() for ln in lines if ln.startswith("hooks: models/")}
    assert {"models/qwen3_vl.py", "models/exaone_moe.py", "models/minimax_m2.py", "models/kimi_linear.py"} <= changed
    added = set(r23["hooks"]) - set(r17["hooks"])
    for model in ("glm5_next", "qwen3_5", "qwen3_5_text", "minimax_m3_vl", "nemotron_h", "lfm2", "mimo_v2",
                  "muse_spark"):
        assert any(k.startswith(f"models/{model}.py:") for k in added), model
    assert drift.drift(r23, r23).none
    assert [drift.nearest(v) for v in ("0.5.23", "0.5.21", "0.5.19", "0.5.12", "0.4.0", "0.6.1", None)] == [
        "0.5.23", "0.5.23", "0.5.17", "0.5.10", "0.5.10", "0.5.23", "0.5.23"]


def test_a_launch_the_release_would_break_or_ignore_is_refused_naming_the_replacement():
    r17, r23 = drift.record("0.5.17"), drift.record("0.5.23")
    assert r17 is not None and r23 is not None
    args = ["--model-path", "/m", "--cuda-graph-max-bs", "8", "--speculative-dflash-draft-window-size", "4",
            "--piecewise-cuda-graph-max-tokens=2048", "--enable-dp-attention", "--no-such-flag"]
    env = {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_SIMULATE_ACC_LEN": "3", "NCCL_P2P_DISABLE": "1",
           "SGLANG_ENABLE_CP_V2": "1", "SGLANG_USE_TRITON_ROUTER_SUM": "1", "SGLANG_NO_SUCH_KNOB": "1"}
    refusals, warnings = drift.launch_problems(r23, args, env)
    assert refusals == [
        "--cuda-graph-max-bs is not a flag of SGLang 0.5.23 (removed after 0.5.17): argparse refuses it as an "
        "ambiguous prefix of --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill; use --cuda-graph-max-bs-decode",
        "--speculative-dflash-draft-window-size is not a flag of SGLang 0.5.23 (removed after 0.5.17); use "
        "--speculative-draft-window-size",
        "--piecewise-cuda-graph-max-tokens is not a flag of SGLang 0.5.23 (removed after 0.5.17); use "
        "--cuda-graph-max-bs-prefill",
        "env SGLANG_ENABLE_CP_V2 has no effect on SGLang 0.5.23: it was removed and only warns (SGLang says: "
        "Strategy-based prefill context parallelism is now the only generic implementation.); remove it from env:",
        "env SGLANG_ENABLE_SPEC_V2 is silently ignored by SGLang 0.5.23 (no code reads it; SGLang 0.5.17 knew it: "
        "speculative decoding always runs the V2 worker. Use --disable-overlap-schedule to select the non-overlap "
        "(synchronous) path.); remove it from env:"]
    assert warnings == ["--enable-dp-attention is due for removal from SGLang after 2026-12-31: use --attn-dp-size "
                        "<dp-size>",
                        "env SGLANG_NO_SUCH_KNOB is read by no code of SGLang 0.5.23: it would be ignored",
                        "env SGLANG_USE_TRITON_ROUTER_SUM is renamed in SGLang 0.5.23 (SGLang says: use "
                        "SGLANG_USE_CUSTOM_ROUTER_SUM)"]
    # the same launch on 0.5.17: the aliases still work; the env var only warns there
    refusals, _ = drift.launch_problems(r17, args[:8], {"SGLANG_ENABLE_SPEC_V2": "1"})
    assert refusals == ["env SGLANG_ENABLE_SPEC_V2 has no effect on SGLang 0.5.17: it was removed and only warns "
                        "(SGLang says: speculative decoding always runs the V2 worker. Use --disable-overlap-schedule "
                        "to select the non-overlap (synchronous) path.); remove it from env:"]


@pytest.fixture
def local_host(tmp_path):
    h = Host(tmp_path, tmp_path / "bin", PY)
    yield h
    h.stop()


async def test_relaunch_refuses_an_ignored_env_var_before_anything_stops(services, local_host):
    """The simulated host's sglang is no full SGLang tree: the record of the release its parser
    reported (0.5.23) stands in, and the step says so."""
    h = local_host
    svc = await open_svc(services, h)
    check = one_step("server.launch", {"check_only": True, "python": h.vars["python"], "model": str(h.target),
                                       "port": h.port, "env": {"SGLANG_ENABLE_SPEC_V2": "1"}})
    out = await svc.engine.run(RunRequest(playbook=check, hosts=["gpu"]))
    assert out.exit_code == 2 and out.steps[0].status == "failed"
    assert out.steps[0].summary.startswith("env SGLANG_ENABLE_SPEC_V2 is silently ignored by SGLang 0.5.23 (no code "
                                           "reads it; SGLang 0.5.17 knew it: ")
    assert out.steps[0].summary.endswith("remove it from env: (refused before anything was stopped or started)")
    output = svc.store.sync.steps(out.run_id)[0]["output"]
    assert "checking with eaglebot's record of SGLang 0.5.23" in output, output
    assert not (h.botstate / "run" / f"server-{h.port}.pid").exists()
    row = svc.store.sync.steps(out.run_id)[0]
    assert json.loads(row["data"])["surface_of"] == "0.5.23"


async def test_doctor_shows_the_hosts_release_and_its_drift_against_the_nearest_record(tmp_path):
    from test_doctor import settings_for
    from eaglebot.frontends.cli.doctor import check_host
    from eaglebot.transport.local import LocalTransport

    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={TREES / 'new'} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    settings = settings_for(tmp_path, {"local": {"transport": "local", "gpu": False, "vars": {"python": str(python)}}})
    checks = await check_host("local", settings.hosts["local"], LocalTransport(), gpu=True)
    by = {c.name: c for c in checks}
    surface = by["host local sglang surface"]
    assert surface.ok and surface.warn and surface.detail == (
        "SGLang 0.2.0 is a release eaglebot has no record of; drift against the nearest, 0.5.10")
    assert by["host local sglang flags"].warn and by["host local sglang flags"].detail.startswith(
        "the flag table moved: server_args.py -> arg_groups/fields/*.py + server_args.py; ")
    assert "spec_accept_histogram dropped (eaglebot reads it)" in by["host local sglang fields"].detail
    # a host whose sglang is not a full SGLang tree (the simulator's): said, and not a failure
    bare = tmp_path / "bare" / "sglang"
    bare.mkdir(parents=True)
    (bare / "__init__.py").write_text("__version__ = '0.5.23'\n")
    python.write_text(f"#!/bin/sh\nPYTHONPATH={bare.parent} exec {sys.executable} \"$@\"\n")
    checks = await check_host("local", settings.hosts["local"], LocalTransport(), gpu=True)
    lines = [c.line() for c in checks if "sglang" in c.name]
    assert lines == [f"WARN  host local sglang surface: not read (the sglang package at {bare} has no srt/models "
                     f"(not a full SGLang install)): the relaunch pre-flight uses eaglebot's record of the release "
                     f"instead"], lines


def test_a_flag_only_a_later_release_has_is_left_to_sglangs_parser_and_an_env_var_of_one_is_ignored():
    r10 = drift.record("0.5.10")
    assert r10 is not None
    refusals, _ = drift.launch_problems(r10, ["--cuda-graph-max-bs-decode", "8"],
                                               {"SGLANG_USE_CUSTOM_ROUTER_SUM": "1"})
    assert refusals == ["env SGLANG_USE_CUSTOM_ROUTER_SUM is silently ignored by SGLang 0.5.10 (no code reads it; "
                        "SGLang 0.5.23 knew it); remove it from env:"]
