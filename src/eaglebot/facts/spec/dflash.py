"""DFLASH's static checks (methods.check's DFLASH branch): where SGLang reads the capture ids, their
range and count against the draft's fc width, `num_target_layers` against the target (sglang#37475), the
block size, the combinations SGLang refuses, and the host model file's own reading of the ids."""
from __future__ import annotations

from typing import Any

from eaglebot.facts.sglang import cmdline
from eaglebot.facts.spec.verdict import NOTE, REFUSE, WARN, Verdict, as_int
from eaglebot.facts.spec.verdict import attn_dp as _attn_dp
from eaglebot.facts.spec.verdict import attn_dp_ignored as _attn_dp_ignored
from eaglebot.facts.spec.verdict import config as _config
from eaglebot.facts.spec.verdict import folder as _folder
from eaglebot.facts.spec.verdict import text as _text



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


def check(v: Verdict, f: dict[str, str | None], host: dict[str, Any], capture: dict[str, Any] | None,
          version: str) -> None:
    mode = f.get("--disaggregation-mode")
    if mode in ("prefill", "decode"):
        v.add("dflash.pd", REFUSE, f"DFLASH with PD disaggregation (--disaggregation-mode {mode}) serves no tokens "
                                   f"(sglang#36140): launch it without --disaggregation-mode")
    if (dp := _attn_dp(f, version)) is not None:
        v.add("dflash.attn_dp", REFUSE, f"DFLASH does not run with attention DP (SGLang's docs; {dp}): drop {dp}")
    elif (why := _attn_dp_ignored(f, version)) is not None:
        v.add("dflash.attn_dp", WARN, why)
    pp = cmdline.int_value(f.get("--pp-size"))
    if pp is not None and pp != 1:
        v.add("dflash.pp", REFUSE, f"DFLASH runs with pp 1 only (SGLang: 'Currently DFLASH speculative decoding "
                                   f"only supports pp_size == 1'): drop --pp-size {pp}")
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk"):
        val = cmdline.int_value(f.get(flag))
        if val is not None and val != 1:
            v.add("dflash.steps", WARN, f"{flag} {val} is overridden to 1 by SGLang for DFLASH (it drafts one block "
                                        f"of --speculative-num-draft-tokens): drop it")
    draft_path = f.get("--speculative-draft-model-path")
    if not draft_path:
        v.add("dflash.draft", REFUSE, "DFLASH needs its draft model (SGLang: 'DFLASH speculative decoding requires "
                                      "setting --speculative-draft-model-path'): set draft (host var draft)")
        return
    tokens = cmdline.int_value(f.get("--speculative-num-draft-tokens"))
    block_flag = cmdline.int_value(f.get("--speculative-dflash-block-size"))
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
