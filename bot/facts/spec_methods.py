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
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from eaglebot.facts import eagle3_probe, sglang_args, spec_files

REFUSE, WARN, NOTE = "refuse", "warn", "note"
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


@dataclass(frozen=True)
class Finding:
    check: str           # a short id: "dflash.ids_location", "mtp.weights", ...
    severity: str        # REFUSE, WARN or NOTE
    message: str         # one sentence; a refusal names the fix


@dataclass
class Verdict:
    algorithm: str | None               # as asked, upper-cased
    resolved: str | None                # what SGLang runs it as (NEXTN -> EAGLE)
    method: str | None                  # the checks applied: DFLASH, MTP, STANDALONE, NGRAM, or None
    findings: list[Finding] = field(default_factory=list)

    def add(self, check: str, severity: str, message: str) -> None:
        self.findings.append(Finding(check, severity, message))

    def of(self, severity: str) -> list[str]:
        return [f.message for f in self.findings if f.severity == severity]

    @property
    def refused(self) -> bool:
        return any(f.severity == REFUSE for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "resolved": self.resolved, "method": self.method,
                "findings": [vars(f) for f in self.findings]}


# -- the host program ---------------------------------------------------------------------------

def program() -> str:
    """The host program's text (standard library only), sent on the Python's stdin."""
    return resources.files("eaglebot.facts").joinpath("spec_files.py").read_text()


def command(python: str, model: str | None, draft: str | None, what: list[str]) -> str:
    return shlex.join([python, "-", json.dumps({"model": model, "draft": draft, "what": what})])


def parse(exit_status: int, stdout: str, stderr: str) -> dict[str, Any] | str:
    """The host's answer, or why there is none (one sentence)."""
    for line in stdout.splitlines():
        if line.startswith(spec_files.UNAVAILABLE):
            return line[len(spec_files.UNAVAILABLE):].strip()
        if line.startswith(spec_files.MARK + " "):
            try:
                doc: dict[str, Any] = json.loads(line[len(spec_files.MARK) + 1:])
            except json.JSONDecodeError:
                return "the reader printed an unreadable answer"
            return doc
    tail = (stderr.strip() or stdout.strip()).splitlines()[-1:] or [f"exit status {exit_status}"]
    return f"the reader did not answer ({tail[0][:200]})"


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


# -- small readers ------------------------------------------------------------------------------

def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _text(doc: dict[str, Any], key: str) -> Any:
    """A config key, or its `text_config`'s (multimodal configs nest the language model)."""
    if key in doc:
        return doc[key]
    t = doc.get("text_config")
    return t.get(key) if isinstance(t, dict) else None


def _flag(f: dict[str, str | None], *names: str) -> str | None:
    for n in names:
        if n in f:
            return f[n] if f[n] is not None else ""
    return None


def _attn_dp(f: dict[str, str | None]) -> str | None:
    """The flag that turns attention DP on, as given ("--attn-dp-size 2"), or None."""
    size = sglang_args.int_value(_flag(f, "--attn-dp-size", "--attention-data-parallel-size"))
    if size is not None and size > 1:
        return f"--attn-dp-size {size}"
    if "--enable-dp-attention" in f:
        return "--enable-dp-attention"
    return None


def is_local(path: str | None) -> bool:
    return bool(path) and str(path).startswith(("/", "./", "../", "~"))


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """SGLang's default DFlash capture when the draft names none (`dflash_utils.build_target_layer_ids`,
    0.5.17 and 0.5.23): evenly spaced from layer 1 to N - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        return []
    span = end - start
    return [int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


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
    f = sglang_args.flag_values(args)
    model = f.get("--model-path")
    draft = f.get("--speculative-draft-model-path")
    if algo == "DFLASH":
        v.method = "DFLASH"
        _dflash(v, f, host, capture)
    elif algo == "NEXTN" or (algo == "EAGLE" and (not draft or draft == model)):
        v.method = "MTP"
        _mtp(v, f, host)
    elif algo == "STANDALONE":
        v.method = "STANDALONE"
        _standalone(v, f, host)
    elif algo == "NGRAM":
        v.method = "NGRAM"
        _ngram(v, f)
    return v


def check_local(args: list[str], sglang_root: str | None = None, version: str = "0.5.23") -> Verdict:
    """`check` with the host program's reading done here, on this machine's folders (a test corpus, or a
    check before copying models to a host): `sglang_root` the SGLang source to read (an unpacked wheel's
    `sglang` folder; None: this Python's, if any)."""
    f = sglang_args.flag_values(args)
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


def _folder(host: dict[str, Any], key: str) -> dict[str, Any] | None:
    got = host.get(key)
    return got if isinstance(got, dict) else None


def _config(v: Verdict, host: dict[str, Any], key: str, what: str, path: str | None) -> dict[str, Any] | None:
    """A folder's config.json, or None with a warning saying why it was not checked."""
    if not is_local(path):
        if path:
            v.add(f"{key}.config", NOTE, f"the {what} {path} is not a folder on the host: its files are not checked")
        return None
    got = _folder(host, key)
    if got is None:
        v.add(f"{key}.config", WARN, f"the {what} folder {path} could not be read on the host: not checked")
        return None
    if not got.get("exists"):
        v.add(f"{key}.exists", REFUSE, f"the {what} folder {path} does not exist on the host: give the right path")
        return None
    if not isinstance(got.get("config"), dict):
        v.add(f"{key}.config", WARN, f"the {what}'s config.json cannot be read ({got.get('config_error')}): "
                                     f"not checked")
        return None
    cfg: dict[str, Any] = got["config"]
    return cfg


# -- DFLASH -------------------------------------------------------------------------------------

def dflash_ids(draft_cfg: dict[str, Any]) -> tuple[list[int] | None, str | None]:
    """(ids, where) as SGLang's `parse_dflash_draft_config` reads them: `dflash_config.target_layer_ids`,
    else a top-level `target_layer_ids`; (None, None) when neither is there."""
    dc = draft_cfg.get("dflash_config")
    dc = dc if isinstance(dc, dict) else {}
    for where, val in (("dflash_config.target_layer_ids", dc.get("target_layer_ids")),
                       ("target_layer_ids", draft_cfg.get("target_layer_ids"))):
        if val is not None:
            ids = [int(x) for x in val] if isinstance(val, (list, tuple)) and all(as_int(x) is not None for x in val) \
                else None
            return ids, where
    return None, None


def dflash_plan(draft_cfg: dict[str, Any], target_layers: int) -> tuple[list[int], str]:
    """The ids SGLang 0.5.23 passes to the target's `set_dflash_layers_to_capture` and where they come
    from (`resolve_target_layer_ids` with the RUNTIME target's layer count)."""
    ids, where = dflash_ids(draft_cfg)
    if ids is not None and where is not None:
        return ids, where
    n_draft = as_int(_text(draft_cfg, "num_hidden_layers")) or 1
    return build_target_layer_ids(target_layers, n_draft), f"SGLang's default for {n_draft} draft layers"


def _dflash(v: Verdict, f: dict[str, str | None], host: dict[str, Any], capture: dict[str, Any] | None) -> None:
    mode = f.get("--disaggregation-mode")
    if mode in ("prefill", "decode"):
        v.add("dflash.pd", REFUSE, f"DFLASH with PD disaggregation (--disaggregation-mode {mode}) serves no tokens "
                                   f"(sglang#36140): launch it without --disaggregation-mode")
    if (dp := _attn_dp(f)) is not None:
        v.add("dflash.attn_dp", REFUSE, f"DFLASH does not run with attention DP (SGLang's docs; {dp}): drop {dp}")
    pp = sglang_args.int_value(f.get("--pp-size"))
    if pp is not None and pp != 1:
        v.add("dflash.pp", REFUSE, f"DFLASH runs with pp 1 only (SGLang: 'Currently DFLASH speculative decoding "
                                   f"only supports pp_size == 1'): drop --pp-size {pp}")
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk"):
        val = sglang_args.int_value(f.get(flag))
        if val is not None and val != 1:
            v.add("dflash.steps", WARN, f"{flag} {val} is overridden to 1 by SGLang for DFLASH (it drafts one block "
                                        f"of --speculative-num-draft-tokens): drop it")
    draft_path = f.get("--speculative-draft-model-path")
    if not draft_path:
        v.add("dflash.draft", REFUSE, "DFLASH needs its draft model (SGLang: 'DFLASH speculative decoding requires "
                                      "setting --speculative-draft-model-path'): set draft (host var draft)")
        return
    tokens = sglang_args.int_value(f.get("--speculative-num-draft-tokens"))
    block_flag = sglang_args.int_value(f.get("--speculative-dflash-block-size"))
    if tokens is not None and block_flag is not None and tokens != block_flag:
        v.add("dflash.block", REFUSE, f"--speculative-num-draft-tokens {tokens} and --speculative-dflash-block-size "
                                      f"{block_flag} differ, and SGLang stops on that for DFLASH: set one of them")
    tcfg = _config(v, host, "model", "target model", f.get("--model-path"))
    dcfg = _config(v, host, "draft", "draft model", draft_path)
    if dcfg is None:
        return
    dc: dict[str, Any] = dcfg["dflash_config"] if isinstance(dcfg.get("dflash_config"), dict) else {}
    block = as_int(dc.get("block_size")) or as_int(dcfg.get("block_size"))
    asked = block_flag if block_flag is not None else tokens
    if asked is not None and block is not None and asked != block:
        flag = "--speculative-dflash-block-size" if block_flag is not None else "--speculative-num-draft-tokens"
        v.add("dflash.block", REFUSE, f"{flag} {asked} differs from the block size the draft was trained with "
                                      f"({block}, its config's block_size), which changes its speedup: set "
                                      f"spec_draft_tokens={block} or leave it unset (SGLang then takes the draft's)")
    elif asked is None and block is None:
        v.add("dflash.block", WARN, "the draft's config has no block_size and none is given: SGLang defaults to 16 "
                                    "draft tokens; set spec_draft_tokens to the block size the draft was trained with")
    ids, where = dflash_ids(dcfg)
    ec = dcfg.get("eagle_config")
    eagle_ids = ec.get("eagle_aux_hidden_state_layer_ids") if isinstance(ec, dict) else None
    if where is not None and ids is None:
        v.add("dflash.ids", REFUSE, f"the draft's {where} is not a list of integers: SGLang stops on it; write the "
                                    f"layer ids training captured there")
        return
    if where is None and eagle_ids is not None:
        v.add("dflash.ids_location", REFUSE,
              f"the draft's capture ids are in eagle_config.eagle_aux_hidden_state_layer_ids ({eagle_ids}), which "
              f"DFLASH never reads (it reads dflash_config.target_layer_ids), so SGLang would pick layers of its own: "
              f"move them to dflash_config.target_layer_ids")
    if as_int(_text(dcfg, "num_hidden_layers")) is None:
        v.add("dflash.draft_layers", REFUSE, "the draft's config.json has no num_hidden_layers (SGLang: 'DFLASH "
                                             "requires draft num_hidden_layers in config'): use the draft's own "
                                             "config.json")
        return
    found = _dflash_layers(v, dcfg, dc, ids, tcfg)
    if found is None:
        return
    plan, plan_from = found
    _dflash_fc(v, dcfg, host, plan, plan_from)
    if capture is not None and tcfg is not None:
        _dflash_capture(v, capture, plan)


def _dflash_layers(v: Verdict, dcfg: dict[str, Any], dc: dict[str, Any], ids: list[int] | None,
                   tcfg: dict[str, Any] | None) -> tuple[list[int], str] | None:
    """The ids SGLang will capture and where from, after the checks against the target's layer count
    (without the target's config: the draft's own ids, unchecked against it; None: no ids known)."""
    n = as_int(_text(tcfg, "num_hidden_layers")) if tcfg is not None else None
    if n is None:
        if tcfg is not None:
            v.add("model.config", WARN, "the target's config.json has no num_hidden_layers: the capture ids are "
                                        "not checked against its layers")
        return (ids, "dflash_config.target_layer_ids") if ids is not None else None
    assert tcfg is not None
    n_runtime = n * (as_int(_text(tcfg, "num_loops")) or 1)
    trained = as_int(dc.get("num_target_layers")) or as_int(dcfg.get("num_target_layers"))
    n_draft = as_int(_text(dcfg, "num_hidden_layers")) or 1
    if trained is not None and trained != n_runtime:
        if ids is None:
            was = build_target_layer_ids(trained, n_draft)
            now = build_target_layer_ids(n_runtime, n_draft)
            v.add("dflash.num_target_layers", REFUSE,
                  f"the draft was trained on a {trained}-layer target (num_target_layers) and names no capture ids, "
                  f"so on this {n_runtime}-layer target SGLang only warns and captures layers {now} instead of the "
                  f"{was} it was trained on (sglang#37475; accept length near 1): set dflash_config.target_layer_ids "
                  f"to {was} if this is the target it was trained for, else use a draft trained for this target")
        else:
            v.add("dflash.num_target_layers", REFUSE,
                  f"the draft's num_target_layers is {trained} but this target has {n_runtime} layers (SGLang 0.5.23 "
                  f"only warns, sglang#37475): use the draft trained for this target, or, if it was, set "
                  f"dflash_config.num_target_layers to {n_runtime}")
    plan, plan_from = dflash_plan(dcfg, n_runtime)
    bad = [i for i in plan if i < 0 or i >= n_runtime]
    if bad:
        v.add("dflash.range", REFUSE, f"the draft's capture ids {plan} ({plan_from}) include {bad}, outside this "
                                      f"target's layers 0..{n_runtime - 1}: SGLang stops on it; set "
                                      f"{plan_from if ids is not None else 'dflash_config.target_layer_ids'} to the "
                                      f"layers training captured")
    return plan, plan_from


def _dflash_fc(v: Verdict, dcfg: dict[str, Any], host: dict[str, Any], plan: list[int], plan_from: str) -> None:
    """The draft's fc input width (its safetensors header) against how many hidden states it gets."""
    hidden = as_int(_text(dcfg, "hidden_size"))
    weights = (_folder(host, "draft") or {}).get("weights") or {}
    fc: dict[str, Any] = weights["fc"] if isinstance(weights, dict) and isinstance(weights.get("fc"), dict) else {}
    shape = fc.get("shape")
    if isinstance(shape, list) and len(shape) == 2 and hidden and all(as_int(x) for x in shape):
        width = int(shape[1])
        if width % hidden:
            v.add("dflash.fc", REFUSE, f"the draft's {fc['name']} is {shape}: its input width {width} is not a "
                                       f"multiple of its hidden_size {hidden}; the checkpoint and config disagree")
        elif width // hidden != len(plan):
            v.add("dflash.fc", REFUSE,
                  f"the draft's {fc['name']} takes {width // hidden} hidden states ({shape} = {width // hidden} x "
                  f"hidden {hidden}) but SGLang would capture {len(plan)} ({plan}, {plan_from}): set "
                  f"dflash_config.target_layer_ids to the {width // hidden} layers training captured")
    elif isinstance(weights, dict) and weights.get("error"):
        v.add("dflash.fc", WARN, f"the draft's fc width is not checked: {weights['error']}")
    elif not fc and isinstance(weights, dict) and weights.get("count"):
        v.add("dflash.fc", WARN, "the draft's checkpoint names no fc.weight: its input width is not checked")


def _dflash_capture(v: Verdict, capture: dict[str, Any], plan: list[int]) -> None:
    """What the host's model file makes of the ids (`set_dflash_layers_to_capture` run on a stand-in)."""
    if capture.get("error"):
        v.add("dflash.hook", REFUSE, f"{capture['error']} (read from the host's SGLang {capture.get('sglang')}): "
                                     f"use a target SGLang serves with DFLASH")
        return
    cases = capture.get("cases") or []
    case = cases[0] if cases else {}
    if case.get("error"):
        v.add("dflash.hook", REFUSE, f"the target's {capture.get('method')} refuses the ids {plan}: {case['error']}; "
                                     f"fix dflash_config.target_layer_ids")
    elif case.get("raw") is not None:
        v.add("dflash.hook", NOTE, f"the target captures after layers {plan} (boundaries {case['raw']} in "
                                   f"{case.get('holder_class')}; {capture.get('method')})")


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

def _standalone(v: Verdict, f: dict[str, str | None], host: dict[str, Any]) -> None:
    if (dp := _attn_dp(f)) is not None:
        v.add("standalone.attn_dp", REFUSE, f"STANDALONE does not run with attention DP (SGLang: 'Currently "
                                            f"standalone speculative decoding does not support dp attention'): "
                                            f"drop {dp}")
    topk = sglang_args.int_value(f.get("--speculative-eagle-topk"))
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

def _ngram(v: Verdict, f: dict[str, str | None]) -> None:
    device = f.get("--device")
    if device is not None and device != "cuda":
        v.add("ngram.device", REFUSE, f"NGRAM speculative decoding runs on CUDA only (SGLang's docs; --device "
                                      f"{device}): drop --device {device}")
    if (dp := _attn_dp(f)) is not None:
        v.add("ngram.attn_dp", REFUSE, f"NGRAM does not run with attention DP (SGLang: 'Currently ngram speculative "
                                       f"decoding does not support dp attention'): drop {dp}")
    breadth = sglang_args.int_value(f.get("--speculative-ngram-max-bfs-breadth"))
    breadth = 10 if breadth is None else breadth      # SGLang's default; it becomes the topk
    page = sglang_args.int_value(f.get("--page-size"))
    backend = f.get("--attention-backend")
    if breadth > 1 and page is not None and page > 1 and backend != "flashinfer":
        v.add("ngram.paged", REFUSE, f"NGRAM with BFS breadth {breadth} and --page-size {page} is only correct on the "
                                     f"flashinfer attention backend (SGLang refuses it): pass --attention-backend "
                                     f"flashinfer, --page-size 1, or --speculative-ngram-max-bfs-breadth 1")
    if f.get("--speculative-draft-model-path"):
        v.add("ngram.draft", NOTE, "NGRAM drafts from its own n-gram cache: the draft model given is not used")
    v.add("ngram.soak", NOTE, "NGRAM crashes with an illegal memory access after hours on some GPUs (sglang#24361): "
                              "a 2-minute bench does not prove it; soak it before trusting it")
