"""Model folders as the speculative methods' checkpoints lay them out, for the method gate's tests
(tests/test_method_gate.py): the real config.json keys and weight names, no weights.

- DeepSeek-V3 (deepseek-ai/DeepSeek-V3): 61 decoder layers (0-2 dense, 3-60 MoE with 256 routed
  experts and a shared one, FP8 with `weight_scale_inv`), its MTP head as layer 61 (`eh_proj`,
  `enorm`, `hnorm`, `shared_head`, `embed_tokens` besides a full MoE layer); the index lists every
  tensor (91k names) in 163 shards, as the real `model.safetensors.index.json` does. `drop_mtp`:
  the quantized re-export that dropped layer 61 (sglang#35797).
- Qwen3-8B (36 layers, hidden 4096) with a real-format safetensors header, and z-lab's
  Qwen3-8B-DFlash-b16 draft (5 layers, `block_size` 16, `num_target_layers` 36,
  `dflash_config.target_layer_ids` [1, 9, 17, 25, 33], `fc.weight` [4096, 5 x 4096] in a
  safetensors file whose header says so: the file is sparse, its tensor bytes never written).
- Qwen3.5 style MTP (`mtp.*` tensors, `mtp_num_hidden_layers`), and tokenizer.json files.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BF16 = 2


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file: the 8-byte header length, the JSON header, then the tensors' bytes, left
    as a hole (sparse) so a 160 MB fc costs no disk; readers of the header see the real layout."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = BF16
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        if offset:
            f.seek(offset - 1, 1)
            f.write(b"\0")


def write_json(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n")


def tokenizer(folder: Path, vocab_size: int, family: str = "qwen", pretty: bool = False) -> None:
    """A BPE tokenizer.json: `family` picks the vocabulary (the same family writes the same one)."""
    vocab = {f"{family}_{i}": i for i in range(vocab_size)}
    doc = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": vocab_size, "content": "<|endoftext|>", "special": True}],
           "model": {"type": "BPE", "vocab": vocab, "merges": [f"{family}_1 {family}_2"]}}
    (folder / "tokenizer.json").write_text(json.dumps(doc, indent=2 if pretty else None))


def deepseek_v3(folder: Path, drop_mtp: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "first_k_dense_replace": 3,
        "n_routed_experts": 256, "n_shared_experts": 1, "vocab_size": 129280,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]}})
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    attn = ["self_attn.q_a_proj.weight", "self_attn.q_a_proj.weight_scale_inv", "self_attn.q_a_layernorm.weight",
            "self_attn.q_b_proj.weight", "self_attn.q_b_proj.weight_scale_inv", "self_attn.kv_a_proj_with_mqa.weight",
            "self_attn.kv_a_proj_with_mqa.weight_scale_inv", "self_attn.kv_a_layernorm.weight",
            "self_attn.kv_b_proj.weight", "self_attn.kv_b_proj.weight_scale_inv", "self_attn.o_proj.weight",
            "self_attn.o_proj.weight_scale_inv", "input_layernorm.weight", "post_attention_layernorm.weight"]
    proj = [f"{p}.{w}" for p in ("gate_proj", "up_proj", "down_proj") for w in ("weight", "weight_scale_inv")]
    for i in range(61 if drop_mtp else 62):
        pre = f"model.layers.{i}."
        names += [pre + a for a in attn]
        if i < 3:
            names += [f"{pre}mlp.{p}" for p in proj]
        else:
            names += [f"{pre}mlp.gate.weight", f"{pre}mlp.gate.e_score_correction_bias"]
            names += [f"{pre}mlp.shared_experts.{p}" for p in proj]
            names += [f"{pre}mlp.experts.{e}.{p}" for e in range(256) for p in proj]
        if i == 61:
            names += [pre + t for t in ("eh_proj.weight", "enorm.weight", "hnorm.weight", "embed_tokens.weight",
                                        "shared_head.head.weight", "shared_head.norm.weight")]
    shards = 163
    wm = {n: f"model-{(k * shards) // len(names) + 1:05d}-of-{shards:06d}.safetensors" for k, n in enumerate(names)}
    write_json(folder / "model.safetensors.index.json", {"metadata": {"total_size": 688586727753}, "weight_map": wm})
    tokenizer(folder, 1000, "deepseek")
    return folder


def qwen3_8b(folder: Path, layers: int = 36) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "num_hidden_layers": layers, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 12288, "vocab_size": 151936, "torch_dtype": "bfloat16"})
    write_json(folder / "model.safetensors.index.json", {"metadata": {"total_size": 16381470720}, "weight_map": {
        **{f"model.layers.{i}.{p}": f"model-0000{1 + i * 5 // layers}-of-00005.safetensors" for i in range(layers)
           for p in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight")},
        "model.embed_tokens.weight": "model-00001-of-00005.safetensors", "lm_head.weight":
            "model-00005-of-00005.safetensors", "model.norm.weight": "model-00005-of-00005.safetensors"}})
    tokenizer(folder, 1000, "qwen")
    return folder


def dflash_draft(folder: Path, ids: tuple[int, ...] | None = (1, 9, 17, 25, 33), fc_states: int = 5,
                 num_target_layers: int | None = 36, block_size: int | None = 16, ids_in: str = "dflash_config",
                 layers: int = 5) -> Path:
    """z-lab/Qwen3-8B-DFlash-b16's config.json and a model.safetensors whose fc.weight is
    [4096, fc_states x 4096]; `ids_in`: where the capture ids are written ("dflash_config", "eagle_config")."""
    folder.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 4096,
        "num_hidden_layers": layers, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 12288, "rms_norm_eps": 1e-06, "vocab_size": 151936, "torch_dtype": "bfloat16",
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"}, "dflash_config": {"mask_token_id": 151669}}
    if block_size is not None:
        doc["block_size"] = block_size
    if num_target_layers is not None:
        doc["num_target_layers"] = num_target_layers
    if ids is not None and ids_in == "dflash_config":
        doc["dflash_config"]["target_layer_ids"] = list(ids)
    elif ids is not None:
        doc["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}
    write_json(folder / "config.json", doc)
    tensors = {"fc.weight": ("BF16", [4096, fc_states * 4096]), "hidden_norm.weight": ("BF16", [4096]),
               "norm.weight": ("BF16", [4096])}
    for i in range(layers):
        tensors[f"layers.{i}.self_attn.q_proj.weight"] = ("BF16", [4096, 4096])
        tensors[f"layers.{i}.input_layernorm.weight"] = ("BF16", [4096])
    write_safetensors(folder / "model.safetensors", tensors)
    return folder


def qwen3_5_mtp(folder: Path, keep_mtp: bool = True) -> Path:
    """Qwen3.5's checkpoint: the MTP head under `mtp.` (`mtp_num_hidden_layers` 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "text_config": {"hidden_size": 4096, "num_hidden_layers": 48, "mtp_num_hidden_layers": 1,
                        "vocab_size": 248320}})
    wm = {f"model.language_model.layers.{i}.mlp.gate.weight": "model-00001-of-00002.safetensors" for i in range(48)}
    if keep_mtp:
        wm.update({f"mtp.{p}": "model-00002-of-00002.safetensors" for p in (
            "fc.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "norm.weight",
            "layers.0.self_attn.q_proj.weight", "layers.0.mlp.gate.weight")})
    write_json(folder / "model.safetensors.index.json", {"metadata": {}, "weight_map": wm})
    return folder


def small_draft(folder: Path, family: str = "qwen", pretty: bool = True) -> Path:
    """A STANDALONE draft: Qwen3-0.6B (28 layers) with the Qwen tokenizer written out again (another
    formatting: the same vocabulary), or, `family="llama"`, a Llama-3.2-1B with its own vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    arch, layers, hidden = ("Qwen3ForCausalLM", 28, 1024) if family == "qwen" else ("LlamaForCausalLM", 16, 2048)
    write_json(folder / "config.json", {"architectures": [arch], "hidden_size": hidden, "num_hidden_layers": layers,
                                        "vocab_size": 151936 if family == "qwen" else 128256})
    tokenizer(folder, 1000, family, pretty=pretty)
    return folder
