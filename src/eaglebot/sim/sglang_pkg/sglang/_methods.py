"""SIMULATED SGLang: the speculative methods beside EAGLE-3 (DFLASH, NGRAM, STANDALONE, NEXTN/MTP),
each as the release's own source resolves, refuses and serves it, and each silent failure the
field reports as a knob of the draft or the environment.

Read from the real wheels (0.5.23; 0.5.17 where it differs), `sglang/srt/`:
- `arg_groups/speculative_hook.py`: `_handle_dflash` (steps and topk forced to 1, the block size
  from `--speculative-dflash-block-size` or the draft config, else 16; pp_size 1; attention DP:
  0.5.17 refuses it, 0.5.23 needs `--enable-dp-lm-head`), `_handle_ngram` (topk := max BFS
  breadth, 12 draft tokens, steps := draft tokens // topk; no attention DP; topk > 1 with
  page_size > 1 only on flashinfer), `_handle_eagle_family` (STANDALONE: no attention DP, auto
  params (3, 1, 4); the MTP architectures' draft path defaults to the target);
- `model_runner_components/spec_aux_hidden_state.py` and `speculative/dflash_utils.py`: DFLASH's
  capture ids (`dflash_config.target_layer_ids`, else spread over the RUNTIME target's layers),
  the WARNING on a `num_target_layers` other than the target's, out-of-range ids;
- `speculative/standalone_worker_v2.py`: a draft with another vocabulary is refused at load.

What the draft was trained on is the sim's ground truth, as a real draft's weights are: the DFLASH
draft's own config as its trainer meant it (`dflash_config.target_layer_ids`, else the ids it wrote
under `eagle_config`, a key DFLASH never reads, else the spread over ITS `num_target_layers`), or
SIMULATED-training.json's `target_layer_ids`. Fed other layers, a DFLASH draft keeps ~95% when each
slot is within one layer (vLLM #40727: "DFlash +-1: about a 5% AL change") and accepts almost
nothing otherwise (sglang#37475: a count collision loads cleanly and reads the wrong layers).

Knobs (environment of the server):
  EAGLE_SIM_BEFORE_23838=1        a release before sglang#23838: STANDALONE with another tokenizer is
                                  not refused; its drafts are mostly rejected and outputs differ (lossy)
  EAGLE_SIM_CRASH_AFTER_REQUESTS=<n>  the n-th /generate ends in `CUDA error: an illegal memory access
                                  was encountered` (sglang#24361, NGRAM after hours on some GPUs): the
                                  scheduler dies and the server with it
A quantized MTP checkpoint whose MTP layer is missing from `model.safetensors.index.json` loads
without a word and accepts nothing (sglang#35797). Standard library only.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUILTIN = ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM")
BUILTIN_0517 = ("DFLASH", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM")
# _handle_eagle_family: these targets carry their MTP/NextN head; the draft path defaults to the target
MTP_ARCHS = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
    "HYV3ForCausalLM", "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration"})
MAX_RUNNING_WARNING = ("Max running requests is reset to 48 for speculative decoding. You can override "
                       "this by explicitly setting --max-running-requests.")
ILLEGAL_ACCESS = "RuntimeError: CUDA error: an illegal memory access was encountered"


class Refused(Exception):
    """What ServerArgs.__post_init__ raises (the launcher dies before loading anything)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def unknown(name: str, version: str) -> str | None:
    """SpeculativeAlgorithm.from_string's refusal of a name it does not know (NEXTN is an alias)."""
    known = BUILTIN_0517 if version == "0.5.17" else BUILTIN
    return None if name.upper() in (*known, "NEXTN") else f"Unknown speculative algorithm name: {name}"


def attn_dp(args: argparse.Namespace, version: str) -> bool:
    """Attention DP is on after ServerArgs' resolution: `--enable-dp-attention` counts only with `--dp-size`
    > 1 (0.5.17's overrides.py _data_parallelism_defaults drops it at dp size 1 unless an elastic-EP scale
    joiner, before the methods' refusals); 0.5.23 `--attn-dp-size` > 1, or the deprecated flag with
    `--dp-size` > 1 (parallel_hook.py moves it there), or a scale joiner (attn_dp_enabled_of)."""
    dp = int(getattr(args, "dp_size", 1) or 1)
    joiner = getattr(args, "ep_join_mode", None) == "scale"
    flag = bool(getattr(args, "enable_dp_attention", False))
    if version == "0.5.17":
        return flag and (dp > 1 or joiner)
    return int(getattr(args, "attn_dp_size", 1) or 1) > 1 or (flag and dp > 1) or joiner


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def dflash_section(cfg: dict[str, Any]) -> dict[str, Any]:
    sec = cfg.get("dflash_config")
    return sec if isinstance(sec, dict) else {}


def dflash_block_size(draft_cfg: dict[str, Any]) -> int | None:
    """parse_dflash_draft_config: `dflash_config.block_size`, else the top-level one."""
    raw = dflash_section(draft_cfg).get("block_size", draft_cfg.get("block_size"))
    return int(raw) if isinstance(raw, int) and raw > 0 else None


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """dflash_utils.build_target_layer_ids: spread over layers 1 .. N-3 (HF layer-output ids)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        raise ValueError("DFlash layer selection requires num_target_layers >= 4. "
                         f"Got num_target_layers={num_target_layers}.")
    span = end - start
    return [int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


# -- launch-time resolution and refusals (ServerArgs.__post_init__) --------------------------------

def handle_dflash(args: argparse.Namespace, version: str) -> list[str]:
    warnings: list[str] = []
    if attn_dp(args, version):
        if version == "0.5.17":
            raise Refused("ValueError", "Currently DFLASH speculative decoding does not support dp attention.")
        if not getattr(args, "enable_dp_lm_head", False):
            raise Refused("ValueError", "DFLASH with dp attention requires --enable-dp-lm-head.")
    if int(getattr(args, "pp_size", 1) or 1) != 1:
        raise Refused("ValueError", "Currently DFLASH speculative decoding only supports pp_size == 1.")
    if args.speculative_draft_model_path is None:
        raise Refused("ValueError", "DFLASH speculative decoding requires setting --speculative-draft-model-path.")
    for key, name in (("speculative_num_steps", "speculative_num_steps"), ("speculative_eagle_topk",
                                                                            "speculative_eagle_topk")):
        v = getattr(args, key)
        if v is not None and int(v) != 1:
            warnings.append(f"DFLASH only supports {name} == 1; overriding {name}={v} to 1.")
        setattr(args, key, 1)
    block = getattr(args, "speculative_dflash_block_size", None)
    if block is not None:
        if int(block) <= 0:
            raise Refused("ValueError", f"DFLASH requires --speculative-dflash-block-size to be positive, got {block}.")
        if args.speculative_num_draft_tokens is not None and int(args.speculative_num_draft_tokens) != int(block):
            raise Refused("ValueError", (
                "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. "
                "For DFLASH they must match. "
                f"speculative_num_draft_tokens={args.speculative_num_draft_tokens}, "
                f"speculative_dflash_block_size={block}."))
        args.speculative_num_draft_tokens = int(block)
    if args.speculative_num_draft_tokens is None:
        inferred = dflash_block_size(read_json(Path(args.speculative_draft_model_path).expanduser() / "config.json"))
        if inferred is None:
            inferred = 16
            warnings.append(f"speculative_num_draft_tokens is not set; defaulting to {inferred} for DFLASH.")
        args.speculative_num_draft_tokens = inferred
    if getattr(args, "speculative_draft_attention_backend", None) is None:
        args.speculative_draft_attention_backend = args.attention_backend or "flashinfer"
    if args.max_running_requests is None:
        args.max_running_requests = 48
        warnings.append(MAX_RUNNING_WARNING)
    if version == "0.5.17" and getattr(args, "enable_mixed_chunk", False):
        args.enable_mixed_chunk = False
        warnings.append("Mixed chunked prefill is disabled because of using dflash speculative decoding.")
    return warnings


def handle_ngram(args: argparse.Namespace, version: str) -> list[str]:
    warnings: list[str] = []
    if args.max_running_requests is None:
        args.max_running_requests = 48
        warnings.append(MAX_RUNNING_WARNING)
    args.enable_mixed_chunk = False
    args.speculative_eagle_topk = args.speculative_ngram_max_bfs_breadth
    if args.speculative_num_draft_tokens is None:
        args.speculative_num_draft_tokens = 12
        warnings.append("speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
                        "You can override this by explicitly setting --speculative-num-draft-tokens.")
    if args.speculative_num_steps is None:
        args.speculative_num_steps = args.speculative_num_draft_tokens // args.speculative_eagle_topk
    warnings.append("The mixed chunked prefill are disabled because of using ngram speculative decoding.")
    page = int(args.page_size or 1)
    if args.speculative_eagle_topk > 1 and page > 1 and (args.attention_backend or "flashinfer") != "flashinfer":
        raise Refused("ValueError", (
            f"speculative_eagle_topk({args.speculative_eagle_topk}) > 1 with page_size({page}) > 1 is unstable "
            "and produces incorrect results for paged attention backends. This combination is only supported "
            "for the 'flashinfer' backend."))
    if attn_dp(args, version):
        raise Refused("ValueError", "Currently ngram speculative decoding does not support dp attention.")
    return warnings


def eagle_family_first(args: argparse.Namespace, architecture: str | None, version: str) -> str | None:
    """_handle_eagle_family's checks before the steps: STANDALONE refuses attention DP; an MTP target's
    draft path defaults to the target itself (revision: the target's). Returns its warning, if any."""
    if args.speculative_algorithm == "STANDALONE" and attn_dp(args, version):
        raise Refused("ValueError", "Currently standalone speculative decoding does not support dp attention.")
    if architecture not in MTP_ARCHS:
        return None
    if getattr(args, "speculative_draft_model_path", None) is None:
        args.speculative_draft_model_path = args.model_path
        args.speculative_draft_model_revision = getattr(args, "revision", None)
        return None
    if architecture not in ("MistralLarge3ForCausalLM", "PixtralForConditionalGeneration"):
        return "DeepSeek MTP does not require setting speculative_draft_model_path."
    return None


# -- what the draft makes of the target, at load and per request ------------------------------------

@dataclass
class Method:
    """A non-EAGLE-3 method's acceptance by position (`healthy` times `quality`), the lines SGLang
    prints at load, a load that fails (`fatal`: the scheduler's exception), and lossy outputs."""
    name: str
    healthy: list[float]
    quality: float = 1.0
    warnings: list[str] = field(default_factory=list)
    fatal: str | None = None
    lossy: float = 0.0

    def depth(self, steps: int, draft_tokens: int) -> int:
        """Draft positions a verify pass can accept: a block's (DFLASH, NGRAM) or a chain's."""
        if self.name in ("DFLASH", "NGRAM"):
            return max(1, draft_tokens - 1)
        return max(1, min(steps, draft_tokens - 1))

    def positions(self, depth: int, prompt: str = "") -> list[float]:
        """`prompt`: the request's prompt as JSON. NGRAM drafts from n-gram matches in the request's own
        context: the random token ids of bench_serving's random dataset have none (accept ~1.0)."""
        if self.name == "NGRAM" and re.match(r"\[\[?\d", prompt):
            return [0.0] * depth
        out = []
        for j in range(depth):
            a = self.healthy[min(j, len(self.healthy) - 1)]
            out.append(a * self.quality ** (j + 1) if self.quality < 1.0 else a)
        return out


# Healthy acceptance by position (P(position j | j-1 accepted)), chosen to give the accept lengths the
# methods' reports give: DFlash ~4-6 at block 16 (z-lab), MTP ~2.4-3 at 3 steps (DeepSeek-V3's 85-90% first
# token), a small same-family draft ~2.3 at 3 steps, n-gram ~1.5 on chat-like prompts (vllm#16258).
HEALTHY = {"DFLASH": [0.86, 0.82, 0.78, 0.74, 0.7, 0.66, 0.62, 0.58],
           "MTP": [0.88, 0.72, 0.62, 0.55],
           "STANDALONE": [0.78, 0.68, 0.6, 0.55],
           "NGRAM": [0.42, 0.36, 0.3, 0.25, 0.2]}


def _dflash(args: argparse.Namespace, target_layers: int) -> Method:
    draft = Path(args.speculative_draft_model_path).expanduser()
    cfg = read_json(draft / "config.json")
    sec = dflash_section(cfg)
    m = Method("DFLASH", HEALTHY["DFLASH"])
    text = cfg.get("text_config")
    layers = (text if isinstance(text, dict) else cfg).get("num_hidden_layers")
    if not isinstance(layers, int) or layers < 1:
        m.fatal = "ValueError: DFLASH requires draft num_hidden_layers in config. Got config without num_hidden_layers."
        return m
    trained_n = sec.get("num_target_layers", cfg.get("num_target_layers"))
    explicit = sec.get("target_layer_ids", cfg.get("target_layer_ids"))
    if isinstance(trained_n, int) and trained_n != target_layers:
        m.warnings.append(f"Draft config num_target_layers={trained_n} differs from runtime target "
                          f"num_hidden_layers={target_layers}; selecting capture layers based on the runtime "
                          f"target model.")
    try:
        if isinstance(explicit, list) and explicit:
            ids = [int(x) for x in explicit]
            for i, v in enumerate(ids):
                if v < 0 or v >= target_layers:
                    m.fatal = ("ValueError: DFLASH target_layer_ids contains an out-of-range layer id. "
                               f"target_layer_ids[{i}]={v}, target_num_layers={target_layers}.")
                    return m
        else:
            ids = build_target_layer_ids(target_layers, layers)
        # the draft's own fc is built from ITS num_target_layers (models/dflash.py)
        own_n = trained_n if isinstance(trained_n, int) else (max(ids) + 1 if isinstance(explicit, list) else layers)
        own = [int(x) for x in explicit] if isinstance(explicit, list) and explicit else build_target_layer_ids(
            own_n, layers)
    except ValueError as e:
        m.fatal = f"ValueError: {e}"
        return m
    hidden = cfg.get("hidden_size")
    width = fc_in_features(draft)
    if isinstance(hidden, int) and width is not None and width != len(own) * hidden:
        m.fatal = (f"AssertionError: Attempted to load weight (torch.Size([{hidden}, {width}])) into parameter "
                   f"(torch.Size([{hidden}, {len(own) * hidden}]))")
        return m
    trained = _trained_ids(draft, cfg, own)
    if len(trained) != len(ids):
        m.quality = 0.02
    elif sorted(trained) != sorted(ids):
        near = all(abs(t - f) <= 1 for t, f in zip(sorted(trained), sorted(ids)))
        m.quality = 0.99 if near else 0.02
    return m


def _trained_ids(draft: Path, cfg: dict[str, Any], own: list[int]) -> list[int]:
    """The layers the DFLASH draft was trained on (see the module docstring)."""
    declared = read_json(draft / "SIMULATED-training.json").get("target_layer_ids")
    if isinstance(declared, list) and declared:
        return [int(x) for x in declared]
    sec = dflash_section(cfg)
    if isinstance(sec.get("target_layer_ids", cfg.get("target_layer_ids")), list):
        return own
    ec = cfg.get("eagle_config")
    if isinstance(ec, dict) and isinstance(ec.get("eagle_aux_hidden_state_layer_ids"), list):
        return [int(x) for x in ec["eagle_aux_hidden_state_layer_ids"]]
    return own


def fc_in_features(draft: Path) -> int | None:
    """The checkpoint's `fc.weight` input width, from the safetensors header (no tensor is read)."""
    for f in sorted(draft.glob("*.safetensors")):
        try:
            with open(f, "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                header = json.loads(fh.read(min(n, 1 << 24)))
        except (OSError, ValueError, struct.error):
            continue
        for name, meta in header.items():
            if name.split(".")[-2:] == ["fc", "weight"] and isinstance(meta, dict):
                shape = meta.get("shape")
                if isinstance(shape, list) and len(shape) == 2:
                    return int(shape[1])
    return None


def _mtp(args: argparse.Namespace, target_cfg: dict[str, Any]) -> Method:
    """NEXTN/EAGLE on a target carrying its MTP head: the head's weights must be in the checkpoint
    (the layer after the last decoder layer); missing ones leave the head at its initial values."""
    m = Method("MTP", HEALTHY["MTP"])
    n, mtp = target_cfg.get("num_hidden_layers"), target_cfg.get("num_nextn_predict_layers")
    index = read_json(Path(args.speculative_draft_model_path).expanduser() / "model.safetensors.index.json")
    names = index.get("weight_map")
    if isinstance(n, int) and isinstance(mtp, int) and mtp > 0 and isinstance(names, dict):
        if not any(k.startswith(f"model.layers.{n}.") for k in names):
            m.quality = 0.0
    return m


def _vocab(folder: Path) -> tuple[Any, str | None]:
    cfg = read_json(folder / "config.json")
    try:
        digest = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    except OSError:
        digest = None
    return cfg.get("vocab_size"), digest


def _standalone(args: argparse.Namespace, target: Path) -> Method:
    m = Method("STANDALONE", HEALTHY["STANDALONE"])
    (tv, th), (dv, dh) = _vocab(target), _vocab(Path(args.speculative_draft_model_path).expanduser())
    other = (tv is not None and dv is not None and tv != dv) or (th is not None and dh is not None and th != dh)
    if not other:
        return m
    if os.environ.get("EAGLE_SIM_BEFORE_23838"):
        m.quality, m.lossy = 0.03, 1.0      # the draft's ids name other tokens: rejected, and outputs differ
    elif tv != dv:
        m.fatal = (f"ValueError: STANDALONE speculative decoding requires the draft model to share the same "
                   f"vocabulary as the target model, but got target vocab_size={tv} and draft vocab_size={dv}. "
                   f"Use a draft model with a matching vocabulary, or a speculative algorithm that supports "
                   f"heterogeneous vocabularies.")
    else:
        m.fatal = ("ValueError: STANDALONE speculative decoding requires the draft model to share the same "
                   "vocabulary as the target model, but the two tokenizers have different token-to-id mappings "
                   "even though their vocab sizes match. Use a draft model with a matching vocabulary, or a "
                   "speculative algorithm that supports heterogeneous vocabularies.")
    return m


def load(args: argparse.Namespace, target_cfg: dict[str, Any], architecture: str | None,
         target_layers: int) -> Method | None:
    """The method the server runs, as its workers load it (None: the EAGLE-3 model of _simulated.py)."""
    algo = args.speculative_algorithm
    if algo == "DFLASH":
        return _dflash(args, target_layers)
    if algo == "NGRAM":
        return Method("NGRAM", HEALTHY["NGRAM"])
    if algo == "STANDALONE" and args.speculative_draft_model_path:
        return _standalone(args, Path(args.model_path).expanduser())
    if algo == "EAGLE" and architecture in MTP_ARCHS and args.speculative_draft_model_path:
        return _mtp(args, target_cfg)
    return None


def crash_after() -> int | None:
    raw = os.environ.get("EAGLE_SIM_CRASH_AFTER_REQUESTS", "")
    return int(raw) if raw.isdigit() else None
