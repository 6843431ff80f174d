"""SGLang's adaptive speculative steps, three ways, one behaviour: the REAL file of SGLang 0.5.23 and
0.5.17 (tests/fixtures/sglang/<version>/adaptive_spec_params.py, copied from the wheels; its sglang
imports answered by stand-ins, it runs as shipped), eaglebot's statement of it
(facts/sglang/adaptive.py) and the simulator's (sim/sglang_pkg/sglang/_adaptive.py). The same
accepted-draft counts go through all three; every switch decision must agree, and every config the
real loader refuses is refused by both copies with SGLang's own sentence."""
from __future__ import annotations

import importlib.util
import json
import random
import sys
import types
from pathlib import Path

import pytest

from eaglebot.facts.sglang import adaptive as facts

ROOT = Path(__file__).resolve().parent
FIXTURES = ROOT / "fixtures" / "sglang"


def _load_sim():
    path = ROOT.parent / "src" / "eaglebot" / "sim" / "sglang_pkg" / "sglang" / "_adaptive.py"
    spec = importlib.util.spec_from_file_location("sim_adaptive_for_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_real(version: str):
    """The real module with its sglang imports answered (only `log_info_on_rank0` is called)."""
    stubs = {
        "sglang": types.ModuleType("sglang"), "sglang.srt": types.ModuleType("sglang.srt"),
        "sglang.srt.arg_groups": types.ModuleType("sglang.srt.arg_groups"),
        "sglang.srt.arg_groups.overrides": types.ModuleType("sglang.srt.arg_groups.overrides"),
        "sglang.srt.runtime_context": types.ModuleType("sglang.srt.runtime_context"),
        "sglang.srt.speculative": types.ModuleType("sglang.srt.speculative"),
        "sglang.srt.speculative.spec_info": types.ModuleType("sglang.srt.speculative.spec_info"),
        "sglang.srt.utils": types.ModuleType("sglang.srt.utils"),
    }
    stubs["sglang.srt.arg_groups.overrides"].resolved_view = lambda a: a
    stubs["sglang.srt.arg_groups.overrides"].resolving_view = lambda a: a
    stubs["sglang.srt.runtime_context"].attn_dp_enabled_of = lambda a: False
    stubs["sglang.srt.speculative.spec_info"].SpeculativeAlgorithm = object
    stubs["sglang.srt.utils"].log_info_on_rank0 = lambda logger, msg: None
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location(f"real_adaptive_{version.replace('.', '_')}",
                                                      FIXTURES / version / "adaptive_spec_params.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


CONFIGS = [
    {"1": {"candidate_steps": [1, 3, 5, 7], "down_hysteresis": -0.25}, "8": {"candidate_steps": [0, 1, 3]},
     "32": {"candidate_steps": [0, 1]}, "64": {"candidate_steps": [0]}},
    {"ema_alpha": 0.3, "update_interval": 3, "warmup_batches": 4,
     "1": {"candidate_steps": [2, 4, 6], "up_hysteresis": 0.4, "down_hysteresis": -0.6},
     "16": {"candidate_steps": [1, 2, 3], "ceiling_coeff": 1.5}},
    {"4": {"candidate_steps": [3, 5], "up_hysteresis": -0.4, "down_hysteresis": 0.1}},
]


@pytest.mark.parametrize("version", ["0.5.23", "0.5.17"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["defaults-like", "knobs-and-ceiling", "flappy"])
def test_every_tier_decision_agrees_with_sglangs_own_file(tmp_path, version, cfg):
    real, sim = _load_real(version), _load_sim()
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(cfg))
    rng = random.Random(version + json.dumps(cfg))
    for initial in sorted({s for e in facts.slots(cfg).values() for s in e["candidate_steps"]}):
        r = real.AdaptiveSpeculativeParams(initial, str(path))
        f = facts.Policy(initial, cfg)
        s = sim.Policy(initial, str(path), None)
        for i in range(3000):
            bs = rng.choice([1, 2, 5, 8, 20, 33, 64, 100])
            steps = r.get_steps_for_batch(bs)
            assert f.route(bs).current_steps == steps == s.route(bs).current_steps, (initial, i, bs)
            counts = [rng.randint(0, max(0, steps)) if rng.random() < 0.7 else min(steps, rng.randint(0, 2))
                      for _ in range(rng.choice([1, 1, 3, 8]))]
            want = r.on_verify_complete(counts, bs)
            got_f = f.route(bs).update(counts)
            got_s = s.route(bs).update(counts)
            assert got_f == (want is not None) and (got_s is not None) == (want is not None), (initial, i, counts)
            assert abs(f.route(bs).ema_accept_len - r._route(bs).ema_accept_len) < 1e-12


@pytest.mark.parametrize("version", ["0.5.23", "0.5.17"])
@pytest.mark.parametrize("bad", [
    {"x": {"candidate_steps": [1]}},
    {"1": {"candidate_steps": []}},
    {"1": {"candidate_steps": [1, -2]}},
    {"1": {"candidate_steps": "1,3"}},
    {"1": {"candidate_steps": [1.5]}},
])
def test_configs_sglang_refuses_are_refused_with_its_words(tmp_path, version, bad):
    real, sim = _load_real(version), _load_sim()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError) as want:
        real._load_adaptive_config(str(path))
    with pytest.raises(ValueError) as got:
        sim.load(str(path))
    assert str(got.value) == str(want.value)
    found = facts.problems(bad)
    assert found and str(want.value).split(",")[0].split(".")[0] in found[0]


def test_the_steps_must_be_a_candidate_and_topk_one():
    cfg = {"1": {"candidate_steps": [3, 5]}, "32": {"candidate_steps": [2]}}
    assert facts.problems(cfg, 3, 1) == []
    assert facts.candidate_steps(cfg) == [2, 3, 5] and facts.initial_steps(cfg) == 3
    assert "is not in the adaptive config candidate_steps [2, 3, 5]" in facts.problems(cfg, 4, 1)[0]
    assert "topk 1 only" in facts.problems(cfg, 3, 4)[0]


def test_switch_lines_are_read_from_sglangs_log_format():
    log = ("[2026-12-02 01:20:27 TP0] AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[3, 5]\n"
           "[2026-12-02 01:20:27 TP0] Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=2.54)\n"
           "[2026-12-02 01:20:28 TP0] Adaptive spec params updated: steps 5 -> 3 (ema_accept_len=1.00)\n")
    assert facts.switches(log) == [(3, 5, 2.54), (5, 3, 1.0)]
    real_src = (FIXTURES / "0.5.23" / "adaptive_spec_params.py").read_text()
    assert 'f"Adaptive spec params updated: steps {old_steps} -> {target} "' in real_src
    assert facts.disabled_reason("[x] speculative_adaptive disabled: speculative_eagle_topk=4 (only topk=1 is "
                                 "supported). Falling back to static speculative params.") == \
        "speculative_eagle_topk=4 (only topk=1 is supported)"


def _sim_resolution():
    """The simulator's launch parser and speculative resolution, loaded as the sim runs them."""
    pkg = ROOT.parent / "src" / "eaglebot" / "sim" / "sglang_pkg"
    sys.path.insert(0, str(pkg))
    try:
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]
        import sglang.launch_server as ls   # the SIMULATED package (src/eaglebot/sim/sglang_pkg)
        return ls
    finally:
        sys.path.remove(str(pkg))


def test_the_simulators_adaptive_launch_resolves_as_sglangs_own_hook(tmp_path):
    """tests/fixtures/sglang/0.5.23/adaptive_resolution.json: the real handle_speculative_decoding
    (scripts/capture/adaptive_capture.py) on five launches with --speculative-adaptive."""
    doc = json.loads((FIXTURES / "0.5.23" / "adaptive_resolution.json").read_text())
    ls = _sim_resolution()
    try:
        cfg = tmp_path / "adaptive.json"
        cfg.write_text(json.dumps(doc["config"]))
        for name, case in doc["cases"].items():
            args = ls.build_parser().parse_args(["--model-path", "/m", "--speculative-algorithm", "EAGLE3",
                                                 "--speculative-adaptive", "--speculative-adaptive-config", str(cfg),
                                                 *case["args"]])
            try:
                warnings = ls.resolve_speculative(args, "LlamaForCausalLM")
            except ls.SpecError as e:
                assert f"{e.kind}: {e}" == case["error"], name
                continue
            assert case["error"] is None, name
            got = [args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens]
            assert got == case["effective"] and args.speculative_adaptive == case["adaptive"], name
            assert warnings == case["warnings"], name
    finally:
        for m in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[m]
