"""The method-aware pre-flight: for each `--speculative-algorithm`, the static checks that catch a
launch SGLang would refuse after the old server is gone, or one that would load cleanly and run at
an accept length of about 1.0 (REFERENCE.md, "Speculative methods and releases"). Pure functions
over what `spec_files` read on the host (and, for DFLASH, what the host's own model file makes of
the capture ids: `eagle3_probe` running `set_dflash_layers_to_capture`).

`check(algorithm, args, host, capture)` is the one entry: a `Verdict` of findings, each a refusal
(one sentence that names the fix), a warning, or a note (`check_local(args)`: the same, with the
host program's reading done on this machine's folders). What it checks, per method:
- every method: the name is one the host's SGLang accepts (its `SpeculativeAlgorithm` and aliases;
  else the list of the release eaglebot knows).
- DFLASH: a draft; no PD disaggregation (no tokens, sglang#36140), no attention DP, pp 1; the capture
  ids where SGLang reads them (`dflash_config.target_layer_ids`, or a top-level `target_layer_ids`;
  never `eagle_config`), in range of the target's layers; their count equal to the draft's `fc`
  input width / hidden size (the safetensors header's shape); `num_target_layers` equal to the
  target's `num_hidden_layers` (0.5.23 only warns and picks other layers: sglang#37475); the block
  size against `--speculative-num-draft-tokens` / `--speculative-dflash-block-size`; the target's
  model file has `set_dflash_layers_to_capture` and accepts the ids.
- NEXTN (and EAGLE without a separate draft: an MTP head): where the draft comes from (the target
  itself when no path is given), an unpinned hub revision (SGLang loads `main`), and whether the
  checkpoint holds the MTP weights the model file loads (DeepSeek-style `model.layers.{N}.*`,
  Qwen-style `mtp.*`): a quantized checkpoint that dropped them runs at accept 1.0 (sglang#35797).
- STANDALONE: a draft with the target's tokenizer (its vocabulary's sha256); no topk > 1 with the
  overlap scheduler; no attention DP.
- NGRAM: a CUDA device, no attention DP, breadth > 1 with paged attention only on flashinfer.
"""
from __future__ import annotations

import json
import shlex
from importlib import resources
from typing import Any

from eaglebot.facts.fact import program_answer
from eaglebot.facts.host_programs import eagle3_probe, spec_files
from eaglebot.facts.sglang import cmdline
from eaglebot.facts.spec import dflash
from eaglebot.facts.spec.dflash import dflash_plan
from eaglebot.facts.spec.verdict import NOTE, REFUSE, WARN, Verdict, as_int, is_local
from eaglebot.facts.spec.verdict import attn_dp as _attn_dp
from eaglebot.facts.spec.verdict import attn_dp_ignored as _attn_dp_ignored
from eaglebot.facts.spec.verdict import config as _config
from eaglebot.facts.spec.verdict import folder as _folder
from eaglebot.facts.spec.verdict import text as _text

# Re-exported: the callers' one door to the method checks (src/eaglebot/skills/lib/method_gate.py, the corpus, tests).
__all__ = ["NOTE", "REFUSE", "WARN", "Verdict", "as_int", "check", "check_local", "command", "dflash_plan", "is_local",
           "needs", "parse", "program"]
TIMEOUT_S = 60.0

# What each release eaglebot knows accepts (`SpeculativeAlgorithm` of its real wheel, NONE left out;
# NEXTN is an alias of EAGLE in every one): used where the host's source cannot be read.
KNOWN_ALGORITHMS = {
    "0.5.10": ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM"),
    "0.5.17": ("DFLASH", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM"),
    "0.5.23": ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM"),
}
ALIASES = {"NEXTN": "EAGLE"}

# Targets whose MTP head SGLang loads from the target checkpoint itself (the draft path defaults to
# the model path: `_handle_eagle_family`), and where that head's weights are: DeepSeek-style
# checkpoints keep it as decoder layer `num_hidden_layers` (with `eh_proj`, `enorm`, `hnorm`), Qwen
# style ones under `mtp.`; MiMo under `model.mtp_layers.`.
_LAYER_N = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
            "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM")
_MTP_PREFIX = {"Qwen3NextForCausalLM": "mtp.", "Qwen3_5ForConditionalGeneration": "mtp.",
               "Qwen3_5MoeForConditionalGeneration": "mtp.", "Qwen3_5ForCausalLM": "mtp.",
               "Qwen3_5MoeForCausalLM": "mtp.", "Qwen3MoeForCausalLM": "mtp.", "MiMoForCausalLM": "model.mtp_layers."}
_MTP_COUNT_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


# -- the host program ---------------------------------------------------------------------------

def program() -> str:
    """The host program's text (standard library only), sent on the Python's stdin."""
    return resources.files("eaglebot.facts.host_programs").joinpath("spec_files.py").read_text()


def command(python: str, model: str | None, draft: str | None, what: list[str]) -> str:
    return shlex.join([python, "-", json.dumps({"model": model, "draft": draft, "what": what})])


def parse(exit_status: int, stdout: str, stderr: str) -> dict[str, Any] | str:
    """The host's answer, or why there is none (one sentence)."""
    return program_answer(spec_files.MARK, spec_files.UNAVAILABLE, "the reader", exit_status, stdout, stderr)


def needs(algorithm: str | None, args: list[str]) -> list[str] | None:
    """What the host must read for this launch's checks ([] only the SGLang source), or None: none."""
    algo = (algorithm or "").strip().upper()
    if not algo or algo == "EAGLE3":
        return None            # EAGLE-3 has draft.check; every release accepts the name
    if algo == "DFLASH":
        return ["weights"]
    if algo in ("NEXTN", "EAGLE"):
        return ["weights"]
    if algo == "STANDALONE":
        return ["tokenizer"]
    return []


# -- the check ----------------------------------------------------------------------------------

def accepted(host_sglang: dict[str, Any] | None, version: str) -> tuple[set[str], dict[str, str], str]:
    """(names, aliases, where from): the host's source, else eaglebot's list for `version`."""
    if host_sglang and isinstance(host_sglang.get("names"), list):
        return set(host_sglang["names"]), dict(host_sglang.get("aliases") or {}), \
            f"SGLang {host_sglang.get('version') or '?'} (the host's source)"
    known = KNOWN_ALGORITHMS.get(version, KNOWN_ALGORITHMS["0.5.23"])
    return set(known), dict(ALIASES), f"SGLang {version} (eaglebot's record)"


def check(algorithm: str | None, args: list[str], host: dict[str, Any] | None,
          capture: dict[str, Any] | None = None, version: str = "0.5.23") -> Verdict:
    """The method's static checks over a launch's arguments and what the host read (`spec_files.read`;
    None: nothing could be read). `capture`: the DFLASH capture probe's answer (`eagle3_probe.probe`
    with `set_dflash_layers_to_capture`) for the ids SGLang will pass, or None."""
    algo = (algorithm or "").strip().upper() or None
    v = Verdict(algo, algo, None)
    if algo is None or algo in ("NONE", "OFF"):
        return v
    host = host or {}
    names, aliases, source = accepted(host.get("sglang") if isinstance(host.get("sglang"), dict) else None, version)
    if algo not in names and algo not in aliases:
        known = ", ".join(sorted(names) + sorted(aliases))
        v.add("algorithm", REFUSE, f"{source} has no speculative algorithm {algo} (it would stop with 'Unknown "
                                   f"speculative algorithm name' after the old server is gone): set spec_algorithm "
                                   f"to one of {known}")
        return v
    v.resolved = aliases.get(algo, algo)
    f = cmdline.flag_values(args)
    model = f.get("--model-path")
    draft = f.get("--speculative-draft-model-path")
    if algo == "DFLASH":
        v.method = "DFLASH"
        dflash.check(v, f, host, capture, version)
    elif algo == "NEXTN" or (algo == "EAGLE" and (not draft or draft == model)):
        v.method = "MTP"
        _mtp(v, f, host)
    elif algo == "STANDALONE":
        v.method = "STANDALONE"
        _standalone(v, f, host, version)
    elif algo == "NGRAM":
        v.method = "NGRAM"
        _ngram(v, f, version)
    return v


def check_local(args: list[str], sglang_root: str | None = None, version: str = "0.5.23") -> Verdict:
    """`check` with the host program's reading done here, on this machine's folders (a test corpus, or a
    check before copying models to a host): `sglang_root` the SGLang source to read (an unpacked wheel's
    `sglang` folder; None: this Python's, if any)."""
    f = cmdline.flag_values(args)
    algo = f.get("--speculative-algorithm")
    what = needs(algo, args)
    host = spec_files.read({"model": f.get("--model-path"), "draft": f.get("--speculative-draft-model-path"),
                            "what": what or [], "sglang_root": sglang_root})
    capture = None
    target = (host.get("model") or {}).get("config")
    draft = (host.get("draft") or {}).get("config")
    if str(algo).upper() == "DFLASH" and "names" in host["sglang"] and isinstance(target, dict) \
            and isinstance(draft, dict) and isinstance(target.get("architectures"), list):
        n = as_int(_text(target, "num_hidden_layers"))
        if n:
            plan, _ = dflash_plan(draft, n * (as_int(_text(target, "num_loops")) or 1))
            capture = eagle3_probe.probe(target["architectures"], n, [plan], host["sglang"]["root"],
                                         "set_dflash_layers_to_capture")
    return check(algo, args, host, capture, version)


# -- NEXTN / MTP --------------------------------------------------------------------------------

def mtp_layers(cfg: dict[str, Any]) -> int | None:
    for key in _MTP_COUNT_KEYS:
        n = as_int(_text(cfg, key))
        if n is not None:
            return n
    return None


def _mtp(v: Verdict, f: dict[str, str | None], host: dict[str, Any]) -> None:
    model, draft = f.get("--model-path"), f.get("--speculative-draft-model-path")
    if not draft:
        v.add("mtp.draft", NOTE, f"no draft given: SGLang loads the MTP head from the target checkpoint itself "
                                 f"({model}; --speculative-draft-model-path defaults to the model path)")
        if model and not is_local(model) and "--revision" not in f:
            v.add("mtp.revision", WARN, f"the target {model} is a hub id with no --revision: the MTP head is loaded "
                                        f"from whatever `main` holds today; pin it with --revision")
    elif not is_local(draft) and "--speculative-draft-model-revision" not in f:
        v.add("mtp.revision", WARN, f"the draft {draft} is a hub id with no --speculative-draft-model-revision: SGLang "
                                    f"loads its `main` revision, whatever it holds today; pin it")
    key, path = ("draft", draft) if draft and draft != model else ("model", model)
    cfg = _config(v, host, key, "MTP checkpoint" if key == "draft" else "target model", path)
    if cfg is None:
        return
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    arch = str(archs[0]) if archs else "?"
    if key == "draft" and ("eagle_config" in cfg or arch.endswith("Eagle3")):
        v.add("mtp.eagle3_draft", REFUSE, f"the draft {draft} is an EAGLE-3 draft ({arch}), which {v.algorithm} "
                                          f"would load as an MTP head: run it with spec_algorithm=EAGLE3, or launch "
                                          f"{v.algorithm} without it (-e draft=none: the target's own MTP head)")
        return
    k = mtp_layers(cfg)
    n = as_int(_text(cfg, "num_hidden_layers"))
    if not draft and k is not None and k < 1:
        v.add("mtp.config", REFUSE, f"{path}'s config says it has no MTP layers ({_MTP_COUNT_KEYS[0]}=0): NEXTN "
                                    f"has nothing to draft with; use the checkpoint with its MTP head, or another "
                                    f"method")
        return
    weights = (_folder(host, key) or {}).get("weights")
    if not isinstance(weights, dict) or weights.get("error") or not weights.get("count"):
        why = weights.get("error") if isinstance(weights, dict) else "not read"
        v.add("mtp.weights", WARN, f"whether {path} holds MTP weights is not checked: {why}")
        return
    where = weights.get("source")
    if arch in _LAYER_N and n is not None:
        want = list(range(n, n + max(k or 1, 1)))
        extra = weights.get("extra_layers") or {}
        missing = [i for i in want if str(i) not in extra]
        if missing:
            v.add("mtp.weights", REFUSE,
                  f"{path} has no MTP weights: model.layers.{missing[0]}.* (the MTP head of this {n}-layer {arch}) is "
                  f"absent from its {where}, so the draft loads without them and accepts about 1.0 (sglang#35797, a "
                  f"quantized checkpoint that dropped them): use a checkpoint that keeps the MTP layer")
        elif "eh_proj" not in extra[str(want[0])]:
            v.add("mtp.weights", REFUSE,
                  f"{path}'s model.layers.{want[0]}.* has no eh_proj (it holds {', '.join(extra[str(want[0])])}): the "
                  f"MTP head is incomplete; use a checkpoint that keeps the whole MTP layer")
        else:
            v.add("mtp.weights", NOTE, f"MTP head found: model.layers.{want[0]}.* ({', '.join(extra[str(want[0])])}) "
                                       f"in {where}")
    elif arch in _MTP_PREFIX:
        prefix = _MTP_PREFIX[arch]
        count = sum(c for p, c in (weights.get("prefixes") or {}).items() if (p + ".").startswith(prefix))
        if not count:
            v.add("mtp.weights", REFUSE, f"{path} has no MTP weights: no {prefix}* tensor in its {where} "
                                         f"({arch} loads its MTP head from there), so the draft accepts about 1.0 "
                                         f"(sglang#35797): use a checkpoint that keeps the {prefix}* tensors")
        else:
            v.add("mtp.weights", NOTE, f"MTP head found: {count} {prefix}* tensors in {where}")
    elif not draft:
        v.add("mtp.weights", WARN, f"eaglebot knows no MTP weight layout for {arch}: whether {path} holds its MTP "
                                   f"head is not checked")


# -- STANDALONE ---------------------------------------------------------------------------------

def _standalone(v: Verdict, f: dict[str, str | None], host: dict[str, Any], version: str) -> None:
    if (dp := _attn_dp(f, version)) is not None:
        v.add("standalone.attn_dp", REFUSE, f"STANDALONE does not run with attention DP (SGLang: 'Currently "
                                            f"standalone speculative decoding does not support dp attention'): "
                                            f"drop {dp}")
    elif (why := _attn_dp_ignored(f, version)) is not None:
        v.add("standalone.attn_dp", WARN, why)
    topk = cmdline.int_value(f.get("--speculative-eagle-topk"))
    if topk is not None and topk > 1 and "--disable-overlap-schedule" not in f:
        v.add("standalone.overlap", REFUSE, f"STANDALONE with --speculative-eagle-topk {topk} is incompatible with "
                                            f"the overlap scheduler, which is on by default: set spec_topk=1, or "
                                            f"pass --disable-overlap-schedule in extra_args")
    draft = f.get("--speculative-draft-model-path")
    if not draft:
        v.add("standalone.draft", REFUSE, "STANDALONE needs a draft model (a small LLM with the target's "
                                          "tokenizer): set draft (host var draft)")
        return
    toks = {}
    for key, path in (("model", f.get("--model-path")), ("draft", draft)):
        got = _folder(host, key) if is_local(path) else None
        tok = got.get("tokenizer") if got else None
        if got is not None and not got.get("exists"):
            v.add(f"{key}.exists", REFUSE, f"the {key} folder {path} does not exist on the host: give the right path")
            return
        if not isinstance(tok, dict) or not tok.get("sha256"):
            why = tok.get("error") if isinstance(tok, dict) else f"{path} is not a folder on the host"
            v.add("standalone.tokenizer", WARN, f"the draft's and target's tokenizers are not compared: {why}")
            return
        toks[key] = tok
    if toks["model"]["sha256"] != toks["draft"]["sha256"]:
        t, d = toks["model"], toks["draft"]
        sizes = f"; {d.get('size')} vs {t.get('size')} tokens" if t.get("size") and d.get("size") else ""
        v.add("standalone.tokenizer", REFUSE,
              f"the draft's tokenizer is not the target's (vocabulary sha256 {d['sha256'][:12]} in its {d['file']} vs "
              f"{t['sha256'][:12]} in the target's{sizes}), which makes STANDALONE lossy or useless (sglang#23838): "
              f"use a draft of the target's family with the same tokenizer")
    else:
        v.add("standalone.tokenizer", NOTE, f"the draft shares the target's tokenizer (sha256 "
                                            f"{toks['model']['sha256'][:12]}, {toks['model']['file']})")


# -- NGRAM --------------------------------------------------------------------------------------

def _ngram(v: Verdict, f: dict[str, str | None], version: str) -> None:
    device = f.get("--device")
    if device is not None and device != "cuda":
        v.add("ngram.device", REFUSE, f"NGRAM speculative decoding runs on CUDA only (SGLang's docs; --device "
                                      f"{device}): drop --device {device}")
    if (dp := _attn_dp(f, version)) is not None:
        v.add("ngram.attn_dp", REFUSE, f"NGRAM does not run with attention DP (SGLang: 'Currently ngram speculative "
                                       f"decoding does not support dp attention'): drop {dp}")
    elif (why := _attn_dp_ignored(f, version)) is not None:
        v.add("ngram.attn_dp", WARN, why)
    breadth = cmdline.int_value(f.get("--speculative-ngram-max-bfs-breadth"))
    breadth = 10 if breadth is None else breadth      # SGLang's default; it becomes the topk
    page = cmdline.int_value(f.get("--page-size"))
    backend = f.get("--attention-backend")
    if breadth > 1 and page is not None and page > 1 and backend != "flashinfer":
        v.add("ngram.paged", REFUSE, f"NGRAM with BFS breadth {breadth} and --page-size {page} is only correct on the "
                                     f"flashinfer attention backend (SGLang refuses it): pass --attention-backend "
                                     f"flashinfer, --page-size 1, or --speculative-ngram-max-bfs-breadth 1")
    if f.get("--speculative-draft-model-path"):
        v.add("ngram.draft", NOTE, "NGRAM drafts from its own n-gram cache: the draft model given is not used")
    v.add("ngram.soak", NOTE, "NGRAM crashes with an illegal memory access after hours on some GPUs (sglang#24361): "
                              "a 2-minute bench does not prove it; soak it before trusting it")
