"""The CI matrix over REAL SGLang releases (issue 44 item 5): the sentinel and the capture program, the
two host programs eaglebot sends to a GPU host, run over the real wheels of 0.5.10, 0.5.17 and 0.5.23
(`pip download sglang==X --no-deps`, every Python file unpacked once under ~/.cache/eaglebot, CPU
only, nothing imported: tests/support/sglang_source.py). Marker e2e: a fresh machine downloads ~70 MB;
.ci/run runs them as a step of their own. The default run has tests/test_sglang_drift.py.

- a same-release re-run reports no drift: each wheel's fingerprint is the record eaglebot ships;
- the flag table read from the source is SGLang's own parser's (the captured real-parser tables);
- every listed 0.5.17 -> 0.5.23 change is detected between the live fingerprints;
- the capture program (eagle3 probe) fits each release's hooks as the shipped capture table says.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from eaglebot.facts.sglang import drift
from eaglebot.facts.spec import eagle3
from support.sglang_source import real_sglang

pytestmark = pytest.mark.e2e
RELEASES = ("0.5.10", "0.5.17", "0.5.23")
ROOT = Path(__file__).resolve().parent.parent
_seen: dict[str, dict[str, Any]] = {}


def fingerprint(version: str) -> dict[str, Any]:
    """As a host answers: the program on a fresh Python's stdin, the unpacked wheel as its sglang."""
    if version not in _seen:
        res = subprocess.run([sys.executable, "-", str(real_sglang(version, full=True))],
                             input=drift.program(), capture_output=True, text=True, timeout=300)
        got = drift.parse(res.returncode, res.stdout, res.stderr)
        assert isinstance(got, dict), got
        _seen[version] = got
    return _seen[version]


@pytest.mark.parametrize("version", RELEASES)
def test_each_real_wheel_matches_its_record_and_a_rerun_reports_no_drift(version):
    fp = fingerprint(version)
    assert fp["sglang"] == version
    rec = drift.record(version)
    assert rec is not None
    d = drift.drift(rec, fp)
    assert d.none, d.lines()
    assert {k: v for k, v in fp.items() if k not in ("root", "elapsed_s")} == rec
    same, headline, changes = drift.report(fp)
    assert same and headline.startswith(f"SGLang {version}: the surface eaglebot relies on matches its record") \
        and changes == {}


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_flag_table_read_from_the_source_is_sglangs_own_parsers(version):
    """tests/fixtures/sglang/<version>/server_args.json.gz: every action of the REAL parser
    (`ServerArgs.add_cli_args`, imported with CPU torch by scripts/capture/sglang.sh)."""
    raw = resources.files("eaglebot.facts").joinpath("data", f"sglang-{version}-server_args.json.gz").read_bytes()
    rows = json.loads(gzip.decompress(raw))["options"]
    real = {o: r["dest"] for r in rows for o in r["options"] if r["action"] != "_HelpAction"}
    deprecated = {o for r in rows if "Deprecated" in r["action"] for o in r["options"]}
    flags = fingerprint(version)["flags"]
    assert flags["options"] == real
    assert set(flags["deprecated"]) == deprecated
    assert flags["allow_abbrev"] is True


def test_every_listed_0517_to_0523_change_is_detected_between_the_real_wheels():
    old, new = fingerprint("0.5.17"), fingerprint("0.5.23")
    lines = drift.drift(old, new).lines()
    assert "flags: the flag table moved: server_args.py -> arg_groups/fields/*.py + server_args.py" in lines
    for flag, fate in (("--cuda-graph-max-bs", "now an ambiguous prefix of --cuda-graph-max-bs-decode, "
                                               "--cuda-graph-max-bs-prefill; it was a deprecated alias of "
                                               "--cuda-graph-max-bs-decode"),
                       ("--speculative-dflash-draft-window-size", "unknown now; it was a deprecated alias of "
                                                                  "--speculative-draft-window-size"),
                       ("--piecewise-cuda-graph-max-tokens", "unknown now; it was a deprecated alias of "
                                                             "--cuda-graph-max-bs-prefill")):
        assert f"flags: {flag} removed ({fate})" in lines
    assert "flags: --enable-dp-attention now deprecated (use --attn-dp-size <dp-size>)" in lines
    assert "env: SGLANG_ENABLE_SPEC_V2: removed -> ignored (no code reads it)" in lines
    for alias in ("spec_accept_histogram", "spec_accepted_drafts", "spec_proposed_drafts"):
        assert f"fields: per_request {alias} dropped (eaglebot reads it)" in lines
    assert "adaptive: built-in defaults: BS1 [1, 3, 7] -> [1, 3, 5, 7]" in lines
    added = sorted(set(new["hooks"]) - set(old["hooks"]))
    changed = sorted(k for k in set(old["hooks"]) & set(new["hooks"]) if old["hooks"][k] != new["hooks"][k])
    assert len(added) == 24 and not set(old["hooks"]) - set(new["hooks"])
    assert [k.split(":")[0] for k in changed] == ["models/exaone_moe.py", "models/kimi_k3.py", "models/kimi_linear.py",
                                                  "models/minimax_m2.py", "models/minimax_m3.py", "models/qwen3_vl.py"]
    # the launch pre-flight on the live 0.5.23 fingerprint
    refusals, _ = drift.launch_problems(new, ["--cuda-graph-max-bs", "8"], {"SGLANG_ENABLE_SPEC_V2": "1"},
                                               history=[fingerprint("0.5.10"), old])
    assert [r.split(":")[0] for r in refusals] == [
        "--cuda-graph-max-bs is not a flag of SGLang 0.5.23 (removed after 0.5.17)",
        "env SGLANG_ENABLE_SPEC_V2 is silently ignored by SGLang 0.5.23 (no code reads it; SGLang 0.5.17 knew it"]


# The capture program over a sample of families (the whole table is scripts/capture/eagle3.sh, ~30 s
# a release): Llama-style +1, Qwen, DeepSeek, gpt-oss's own forward, MiniMax, Gemma, Kimi.
SAMPLE = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM",
          "GptOssForCausalLM", "MiniMaxM2ForCausalLM", "Gemma3ForCausalLM", "KimiK25ForConditionalGeneration")


@pytest.mark.parametrize("version", RELEASES)
def test_the_capture_program_fits_each_real_release_as_its_shipped_table_says(version):
    spec = importlib.util.spec_from_file_location("eagle3_capture", ROOT / "scripts" / "capture" / "eagle3_capture.py")
    assert spec is not None and spec.loader is not None
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)
    ns: dict[str, Any] = {"__name__": "eagle3_probe_matrix"}
    exec(compile(eagle3.probe_program(), "eagle3_probe", "exec"), ns)
    src = ns["Source"](str(real_sglang(version)))
    table = eagle3.load_table(version)
    assert table["sglang"] == version and table["reader"] == ns["find_reader"](src)
    checked = [a for a in SAMPLE if a in table["archs"]]
    assert len(checked) >= 6, checked
    for arch in checked:
        assert capture.fit_arch(ns["probe"], src, arch) == table["archs"][arch], arch


async def test_doctor_on_a_host_with_the_real_0523_says_its_surface_matches_the_record(tmp_path):
    """What an operator sees: the sentinel needs no import, so it answers even where `import sglang`
    fails (here: the wheel without its dependencies)."""
    from test_doctor import settings_for
    from eaglebot.frontends.cli.doctor import check_host
    from eaglebot.transport.local import LocalTransport

    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={real_sglang('0.5.23', full=True).parent} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    settings = settings_for(tmp_path, {"local": {"transport": "local", "gpu": False, "vars": {"python": str(python)}}})
    checks = await check_host("local", settings.hosts["local"], LocalTransport(), gpu=True)
    lines = [c.line() for c in checks if "sglang" in c.name]
    assert len(lines) == 1 and lines[0].startswith(
        "ok    host local sglang surface: SGLang 0.5.23: the surface eaglebot relies on matches its record (559 flags, "), \
        lines
