"""The method-aware pre-flight (issue 44 item 1): per speculative method, one healthy launch and one
launch per fault, each over model folders laid out as the real checkpoints are (tests/support/spec_models.py)
and read on the host by the real host program over the local transport, with the host's Python
seeing the REAL SGLang 0.5.23 source (tests/support/sglang_source.py: the unpacked wheel, nothing imported)
so DFLASH's capture runs the target's own `set_dflash_layers_to_capture`. Each fault is refused with
one sentence naming the fix; each healthy launch has no refusal and no warning."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from support import spec_models as sm
from eaglebot.engine.runner import RunRequest
from eaglebot.facts.spec import methods
from eaglebot.skills.lib import method_gate
from eaglebot.testing import context
from eaglebot.transport.local import LocalTransport
from support.inproc import eagle_here
from support.sglang_source import real_sglang
from test_server_skills import local_host  # noqa: F401  (the simulated GPU host, a fixture)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    sm.qwen3_8b(root / "qwen3-8b")
    sm.qwen3_8b(root / "qwen3-32l", layers=32)
    sm.dflash_draft(root / "dflash")
    sm.dflash_draft(root / "dflash-fc3", fc_states=3)
    sm.dflash_draft(root / "dflash-eagle-key", ids_in="eagle_config")
    sm.dflash_draft(root / "dflash-out-of-range", ids=(1, 9, 17, 25, 36))
    sm.dflash_draft(root / "dflash-40l-noids", ids=None, num_target_layers=40)
    sm.deepseek_v3(root / "deepseek-v3")
    sm.deepseek_v3(root / "deepseek-v3-fp4-nomtp", drop_mtp=True)
    sm.qwen3_5_mtp(root / "qwen3.5")
    sm.qwen3_5_mtp(root / "qwen3.5-nomtp", keep_mtp=False)
    return root


@pytest.fixture(scope="module")
def host_python(tmp_path_factory) -> str:
    """A host Python that has SGLang 0.5.23 installed (its real source, never imported)."""
    site = real_sglang("0.5.23", full=True).parent
    path = tmp_path_factory.mktemp("bin") / "python-sglang"
    path.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def launch(models: Path, algo: str, model: str, draft: str | None = None, *extra: str) -> list[str]:
    return ["--model-path", str(models / model), *(["--speculative-draft-model-path", str(models / draft)]
                                                   if draft else []), "--speculative-algorithm", algo, *extra]


async def gate(args: list[str], python: str) -> tuple[methods.Verdict, list[str]]:
    log: list[str] = []
    v = await method_gate.verdict(context(LocalTransport(), log=log), python, args, "0.5.23")
    return v, log


def only(v: methods.Verdict, check: str) -> str:
    """The one refusal, which must be `check`'s."""
    refusals = [f for f in v.findings if f.severity == methods.REFUSE]
    assert [f.check for f in refusals] == [check], v.to_json()
    return refusals[0].message


# -- DFLASH -------------------------------------------------------------------------------------

async def test_dflash_healthy_reads_the_capture_from_the_targets_own_hook(models, host_python):
    v, log = await gate(launch(models, "DFLASH", "qwen3-8b", "dflash"), host_python)
    assert v.method == "DFLASH" and not v.of(methods.REFUSE) and not v.of(methods.WARN), v.to_json()
    assert v.of(methods.NOTE) == [
        "the target captures after layers [1, 9, 17, 25, 33] (boundaries [2, 10, 18, 26, 34] in "
        "sglang.srt.models.qwen3.Qwen3Model; sglang/srt/models/qwen3.py:793 (Qwen3ForCausalLM))"]


DFLASH_FAULTS = [
    ("dflash-fc3", (), "dflash.fc",
     "the draft's fc.weight takes 3 hidden states ([4096, 12288] = 3 x hidden 4096) but SGLang would capture 5 "
     "([1, 9, 17, 25, 33], dflash_config.target_layer_ids): set dflash_config.target_layer_ids to the 3 layers "
     "training captured"),
    ("dflash-eagle-key", (), "dflash.ids_location",
     "the draft's capture ids are in eagle_config.eagle_aux_hidden_state_layer_ids ([1, 9, 17, 25, 33]), which "
     "DFLASH never reads (it reads dflash_config.target_layer_ids), so SGLang would pick layers of its own: move "
     "them to dflash_config.target_layer_ids"),
    ("dflash-out-of-range", (), "dflash.range",
     "the draft's capture ids [1, 9, 17, 25, 36] (dflash_config.target_layer_ids) include [36], outside this "
     "target's layers 0..35: SGLang stops on it; set dflash_config.target_layer_ids to the layers training "
     "captured"),
    ("dflash-40l-noids", (), "dflash.num_target_layers",
     "the draft was trained on a 40-layer target (num_target_layers) and names no capture ids, so on this "
     "36-layer target SGLang only warns and captures layers [1, 9, 17, 25, 33] instead of the [1, 10, 19, 28, 37] "
     "it was trained on (sglang#37475; accept length near 1): set dflash_config.target_layer_ids to "
     "[1, 10, 19, 28, 37] if this is the target it was trained for, else use a draft trained for this target"),
    ("dflash", ("--speculative-num-draft-tokens", "8"), "dflash.block",
     "--speculative-num-draft-tokens 8 differs from the block size the draft was trained with (16, its config's "
     "block_size), which changes its speedup: set spec_draft_tokens=16 or leave it unset (SGLang then takes the "
     "draft's)"),
    ("dflash", ("--disaggregation-mode", "decode"), "dflash.pd",
     "DFLASH with PD disaggregation (--disaggregation-mode decode) serves no tokens (sglang#36140): launch it "
     "without --disaggregation-mode"),
    ("dflash", ("--attn-dp-size", "2"), "dflash.attn_dp",
     "DFLASH does not run with attention DP (SGLang's docs; --attn-dp-size 2): drop --attn-dp-size 2"),
    ("dflash", ("--pp-size", "2"), "dflash.pp",
     "DFLASH runs with pp 1 only (SGLang: 'Currently DFLASH speculative decoding only supports pp_size == 1'): "
     "drop --pp-size 2"),
]


@pytest.mark.parametrize("draft,extra,check,message", DFLASH_FAULTS, ids=[f"{c[2]}-{c[0]}" for c in DFLASH_FAULTS])
async def test_dflash_fault_is_refused_naming_the_fix(models, host_python, draft, extra, check, message):
    v, _ = await gate(launch(models, "DFLASH", "qwen3-8b", draft, *extra), host_python)
    assert only(v, check) == message


async def test_dflash_on_a_target_whose_model_file_has_no_hook_is_refused(models, host_python, tmp_path):
    qwen2 = sm.qwen3_8b(tmp_path / "qwen2")
    cfg = (qwen2 / "config.json").read_text().replace("Qwen3ForCausalLM", "Qwen2ForCausalLM")
    (qwen2 / "config.json").write_text(cfg)
    v, _ = await gate(["--model-path", str(qwen2), "--speculative-draft-model-path", str(models / "dflash"),
                       "--speculative-algorithm", "DFLASH"], host_python)
    assert only(v, "dflash.hook") == (
        "Qwen2ForCausalLM (sglang.srt.models.qwen2) has no set_dflash_layers_to_capture: SGLang refuses DFLASH for "
        "this target at start-up (read from the host's SGLang 0.5.23): use a target SGLang serves with DFLASH")


async def test_dflash_with_a_hub_target_still_checks_the_drafts_own_files(models, host_python, tmp_path):
    """The target is a hub id (its config is not on the host): the draft's ids against its own fc still are."""
    args = ["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "DFLASH"]
    v, _ = await gate([*args, "--speculative-draft-model-path", str(models / "dflash-fc3")], host_python)
    assert only(v, "dflash.fc").startswith("the draft's fc.weight takes 3 hidden states ([4096, 12288]")
    assert "the target model Qwen/Qwen3-8B is not a folder on the host: its files are not checked" \
        in v.of(methods.NOTE)
    broken = sm.dflash_draft(tmp_path / "no-layers")
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["num_hidden_layers"]
    (broken / "config.json").write_text(json.dumps(cfg))
    v, _ = await gate([*args, "--speculative-draft-model-path", str(broken)], host_python)
    assert only(v, "dflash.draft_layers") == (
        "the draft's config.json has no num_hidden_layers (SGLang: 'DFLASH requires draft num_hidden_layers in "
        "config'): use the draft's own config.json")


# -- NEXTN / MTP --------------------------------------------------------------------------------

async def test_nextn_healthy_deepseek_v3_has_its_mtp_layer(models, host_python):
    v, _ = await gate(launch(models, "NEXTN", "deepseek-v3"), host_python)
    assert v.method == "MTP" and v.resolved == "EAGLE" and not v.of(methods.REFUSE) \
        and not v.of(methods.WARN), v.to_json()
    notes = v.of(methods.NOTE)
    assert notes[0].startswith("no draft given: SGLang loads the MTP head from the target checkpoint itself")
    assert notes[1] == ("MTP head found: model.layers.61.* (eh_proj, embed_tokens, enorm, hnorm, input_layernorm, "
                        "mlp, post_attention_layernorm, self_attn, shared_head) in model.safetensors.index.json")


async def test_nextn_on_a_checkpoint_that_dropped_its_mtp_weights_is_refused(models, host_python):
    v, _ = await gate(launch(models, "NEXTN", "deepseek-v3-fp4-nomtp"), host_python)
    assert only(v, "mtp.weights") == (
        f"{models / 'deepseek-v3-fp4-nomtp'} has no MTP weights: model.layers.61.* (the MTP head of this 61-layer "
        f"DeepseekV3ForCausalLM) is absent from its model.safetensors.index.json, so the draft loads without them "
        f"and accepts about 1.0 (sglang#35797, a quantized checkpoint that dropped them): use a checkpoint that "
        f"keeps the MTP layer")


async def test_nextn_qwen_style_mtp_prefix(models, host_python):
    ok, _ = await gate(launch(models, "NEXTN", "qwen3.5"), host_python)
    assert not ok.of(methods.REFUSE) and "MTP head found: 6 mtp.* tensors in model.safetensors.index.json" \
        in ok.of(methods.NOTE), ok.to_json()
    bad, _ = await gate(launch(models, "NEXTN", "qwen3.5-nomtp"), host_python)
    assert only(bad, "mtp.weights").startswith(f"{models / 'qwen3.5-nomtp'} has no MTP weights: no mtp.* tensor in "
                                               f"its model.safetensors.index.json")


async def test_nextn_unpinned_hub_draft_is_warned():
    v = methods.check("NEXTN", ["--model-path", "deepseek-ai/DeepSeek-V3", "--speculative-algorithm", "NEXTN"],
                           {})
    assert v.of(methods.WARN) == [
        "the target deepseek-ai/DeepSeek-V3 is a hub id with no --revision: the MTP head is loaded from whatever "
        "`main` holds today; pin it with --revision"]


# -- every method -------------------------------------------------------------------------------

async def test_an_algorithm_the_hosts_sglang_does_not_have_is_refused(models, host_python):
    v, _ = await gate(launch(models, "DFLASH2", "qwen3-8b", "dflash"), host_python)
    assert only(v, "algorithm") == (
        "SGLang 0.5.23 (the host's source) has no speculative algorithm DFLASH2 (it would stop with 'Unknown "
        "speculative algorithm name' after the old server is gone): set spec_algorithm to one of DFLASH, DSPARK, "
        "EAGLE, EAGLE3, FROZEN_KV_MTP, NGRAM, STANDALONE, UNO, NEXTN")


def test_the_releases_own_lists_of_algorithms_are_what_the_real_wheels_accept():
    """eaglebot's record (used where the host's source cannot be read) is each real wheel's enum."""
    from eaglebot.facts.host_programs import spec_files
    for version, names in methods.KNOWN_ALGORITHMS.items():
        got = spec_files.sglang(str(real_sglang(version, full=True)))
        assert (tuple(got["names"]), got["aliases"]) == (names, methods.ALIASES), version


# -- STANDALONE ---------------------------------------------------------------------------------

async def test_standalone_healthy_draft_shares_the_tokenizer_whatever_its_formatting(models, host_python):
    sm.small_draft(models / "qwen3-0.6b")
    v, _ = await gate(launch(models, "STANDALONE", "qwen3-8b", "qwen3-0.6b", "--speculative-num-steps", "3",
                             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"), host_python)
    assert v.method == "STANDALONE" and not v.of(methods.REFUSE) and not v.of(methods.WARN), v.to_json()
    assert v.of(methods.NOTE)[0].startswith("the draft shares the target's tokenizer (sha256 ")


async def test_standalone_faults_are_refused_naming_the_fix(models, host_python):
    sm.small_draft(models / "llama-3.2-1b", family="llama")
    sm.small_draft(models / "qwen3-0.6b")
    v, _ = await gate(launch(models, "STANDALONE", "qwen3-8b", "llama-3.2-1b"), host_python)
    msg = only(v, "standalone.tokenizer")
    assert msg.startswith("the draft's tokenizer is not the target's (vocabulary sha256 ") and msg.endswith(
        "in the target's; 1001 vs 1001 tokens), which makes STANDALONE lossy or useless (sglang#23838): use a draft "
        "of the target's family with the same tokenizer"), msg
    v, _ = await gate(launch(models, "STANDALONE", "qwen3-8b", "qwen3-0.6b", "--speculative-num-steps", "4",
                             "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"), host_python)
    assert only(v, "standalone.overlap") == (
        "STANDALONE with --speculative-eagle-topk 4 is incompatible with the overlap scheduler, which is on by "
        "default: set spec_topk=1, or pass --disable-overlap-schedule in extra_args")
    v, _ = await gate(launch(models, "STANDALONE", "qwen3-8b", "qwen3-0.6b", "--speculative-num-steps", "4",
                             "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
                             "--disable-overlap-schedule"), host_python)
    assert not v.of(methods.REFUSE), v.to_json()
    v, _ = await gate(launch(models, "STANDALONE", "qwen3-8b", "qwen3-0.6b", "--enable-dp-attention", "--dp-size", "2"),
                      host_python)
    assert only(v, "standalone.attn_dp") == (
        "STANDALONE does not run with attention DP (SGLang: 'Currently standalone speculative decoding does not "
        "support dp attention'): drop --enable-dp-attention --dp-size 2")


# -- NGRAM --------------------------------------------------------------------------------------

async def test_ngram_healthy_and_each_combination_sglang_refuses(models, host_python):
    v, _ = await gate(launch(models, "NGRAM", "qwen3-8b"), host_python)
    assert v.method == "NGRAM" and not v.of(methods.REFUSE) and not v.of(methods.WARN), v.to_json()
    assert v.of(methods.NOTE) == [
        "NGRAM crashes with an illegal memory access after hours on some GPUs (sglang#24361): a 2-minute bench does "
        "not prove it; soak it before trusting it"]
    cases = [(("--device", "cpu"), "ngram.device",
              "NGRAM speculative decoding runs on CUDA only (SGLang's docs; --device cpu): drop --device cpu"),
             (("--attn-dp-size", "4"), "ngram.attn_dp",
              "NGRAM does not run with attention DP (SGLang: 'Currently ngram speculative decoding does not support dp "
              "attention'): drop --attn-dp-size 4"),
             (("--page-size", "16"), "ngram.paged",
              "NGRAM with BFS breadth 10 and --page-size 16 is only correct on the flashinfer attention backend "
              "(SGLang refuses it): pass --attention-backend flashinfer, --page-size 1, or "
              "--speculative-ngram-max-bfs-breadth 1")]
    for extra, check, message in cases:
        v, _ = await gate(launch(models, "NGRAM", "qwen3-8b", None, *extra), host_python)
        assert only(v, check) == message
    v, _ = await gate(launch(models, "NGRAM", "qwen3-8b", None, "--page-size", "16", "--attention-backend",
                             "flashinfer"), host_python)
    assert not v.of(methods.REFUSE), v.to_json()


# -- attention DP per release: a lone --enable-dp-attention is dropped at DP size 1 ---------------

DROPPED_BY = {"0.5.10": "server_args.py _handle_data_parallelism",
              "0.5.17": "arg_groups/overrides.py _data_parallelism_defaults",
              "0.5.23": "arg_groups/parallel_hook.py, which moves it to --attn-dp-size <dp-size>"}
DP_CASES = [(version, algo, dp) for version in DROPPED_BY for algo in ("NGRAM", "STANDALONE", "DFLASH")
            for dp in (None, "1", "2") if (version, algo) != ("0.5.10", "DFLASH")]


@pytest.mark.parametrize("version,algo,dp", DP_CASES, ids=[f"{v}-{a}-dp{d or 'unset'}" for v, a, d in DP_CASES])
def test_enable_dp_attention_is_attention_dp_only_with_a_dp_size_above_1(version, algo, dp):
    """A real 0.5.17 on an H200 served NGRAM with a lone --enable-dp-attention (2026-12-03): every release drops
    the flag at DP size 1 before the methods' refusals, so the gate warns instead of refusing there."""
    spelled = "--data-parallel-size" if version == "0.5.10" else "--dp-size"
    args = ["--model-path", "/m", "--speculative-draft-model-path", "/d", "--enable-dp-attention",
            *([spelled, dp] if dp else [])]
    v = methods.check(algo, args, None, None, version)
    mine = [(f.severity, f.message) for f in v.findings if f.check == f"{algo.lower()}.attn_dp"]
    if dp == "2":
        assert [s for s, _ in mine] == [methods.REFUSE] and mine[0][1].endswith(
            "drop --enable-dp-attention --dp-size 2"), mine
    else:
        assert mine == [(methods.WARN, f"SGLang {version} ignores --enable-dp-attention without --dp-size > 1 "
                                            f"({DROPPED_BY[version]}): attention DP is off; drop the flag, or pass "
                                            f"--dp-size N (N > 1) if you meant attention DP")], mine


@pytest.mark.parametrize("version,refused", [("0.5.17", False), ("0.5.23", True)])
def test_an_elastic_ep_scale_joiner_runs_attention_dp_at_dp_size_1(version, refused):
    """0.5.23's attn_dp_enabled_of is true for a scale joiner; 0.5.17 keeps only a given --enable-dp-attention."""
    v = methods.check("NGRAM", ["--model-path", "/m", "--elastic-ep-join-mode", "scale"], None, None, version)
    assert v.refused is refused, v.to_json()
    v = methods.check("NGRAM", ["--model-path", "/m", "--elastic-ep-join-mode", "scale", "--enable-dp-attention"],
                           None, None, version)
    assert v.refused, v.to_json()


# -- through relaunch: refused before anything stops --------------------------------------------

async def test_relaunch_refuses_a_dflash_fault_in_its_first_step(services, local_host, models):
    """The simulated host (its SGLang parser answers; its source has no srt/models, so the capture is
    read from the configs) with a DFlash draft trained for a 40-layer target: the run stops at `check
    the launch` (exit 2), nothing after it runs, and the refusal and its data are audited."""
    h = local_host
    svc = await services({"gpu": h.config}, state_dir=str(h.botstate))
    inputs = {"spec_algorithm": "DFLASH", "model": str(models / "qwen3-8b"), "draft": str(models / "dflash-40l-noids"),
              "bench_prompts": "0"}
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=inputs))
    first = out.steps[0]
    assert out.exit_code == 2 and first.name == "check the launch" and first.status == "failed", \
        [(s.name, s.status, s.summary) for s in out.steps]
    assert first.summary.startswith("DFLASH: the draft was trained on a 40-layer target (num_target_layers)")
    assert first.summary.endswith("(refused before anything was stopped or started; -e method_check=warn launches "
                                  "anyway)"), first.summary
    assert all(s.status == "skipped" for s in out.steps if s.section == "steps" and s.idx > 0)
    row = next(r for r in svc.store.sync.steps(out.run_id) if r["name"] == "check the launch")
    checks = json.loads(row["data"])["method_checks"]
    assert [f["check"] for f in checks["findings"] if f["severity"] == "refuse"] == ["dflash.num_target_layers"]


def test_the_cli_shows_the_refusal_and_its_exit_code(local_host, models, tmp_path):
    h = local_host
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(json.dumps({"audit_db": str(tmp_path / "eagle.db"), "state_dir": str(h.botstate),
                               "hosts": {"gpu": h.config}}))
    res = eagle_here("run", "relaunch", "-H", "gpu", "-e", "spec_algorithm=NEXTN", "-e",
                     f"model={models / 'deepseek-v3-fp4-nomtp'}", "-e", "draft=none", "-e", "bench_prompts=0",
                     config=cfg)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"NEXTN: {models / 'deepseek-v3-fp4-nomtp'} has no MTP weights: model.layers.61.*" in res.stdout + res.stderr


def test_check_local_gives_what_the_host_gives(models):
    """The corpus entry: the same verdict with the reading done in this process (no transport)."""
    root = str(real_sglang("0.5.23", full=True))
    v = methods.check_local(launch(models, "DFLASH", "qwen3-8b", "dflash-fc3"), root)
    assert only(v, "dflash.fc").startswith("the draft's fc.weight takes 3 hidden states")
    ok = methods.check_local(launch(models, "DFLASH", "qwen3-8b", "dflash"), root)
    assert not ok.refused and ok.of(methods.NOTE)[0].startswith("the target captures after layers [1, 9, 17")
