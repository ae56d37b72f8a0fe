"""llama.cpp's tensor names -> the Hugging Face names ft's model definitions read, per architecture,
and the one data transformation llama.cpp's converter applies to them: the Q / K rows of ``llama``
(Mixtral) permuted from Hugging Face's half-split rotary layout into GGML's interleaved one.

Only non-expert tensors are mapped here; routed experts go to the bank (loader/gguf_experts.py).
"""

from __future__ import annotations

import re

import torch

from ft_core.loader import gguf_deepseek2, gguf_qwen35

# GGUF name (without ".weight" / ".bias") -> HF module name, "{n}" the block number.
_COMMON = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "blk.{n}.attn_norm": "model.layers.{n}.input_layernorm",
    "blk.{n}.attn_q": "model.layers.{n}.self_attn.q_proj",
    "blk.{n}.attn_k": "model.layers.{n}.self_attn.k_proj",
    "blk.{n}.attn_v": "model.layers.{n}.self_attn.v_proj",
    "blk.{n}.attn_output": "model.layers.{n}.self_attn.o_proj",
    "blk.{n}.attn_q_norm": "model.layers.{n}.self_attn.q_norm",
    "blk.{n}.attn_k_norm": "model.layers.{n}.self_attn.k_norm",
    "blk.{n}.ffn_norm": "model.layers.{n}.post_attention_layernorm",
    "blk.{n}.ffn_gate_inp": "model.layers.{n}.mlp.gate",
    "blk.{n}.ffn_gate": "model.layers.{n}.mlp.gate_proj",
    "blk.{n}.ffn_up": "model.layers.{n}.mlp.up_proj",
    "blk.{n}.ffn_down": "model.layers.{n}.mlp.down_proj",
    "blk.{n}.ffn_gate_shexp": "model.layers.{n}.mlp.shared_expert.gate_proj",
    "blk.{n}.ffn_up_shexp": "model.layers.{n}.mlp.shared_expert.up_proj",
    "blk.{n}.ffn_down_shexp": "model.layers.{n}.mlp.shared_expert.down_proj",
    "blk.{n}.ffn_gate_inp_shexp": "model.layers.{n}.mlp.shared_expert_gate",
}
_MIXTRAL = {**_COMMON, "blk.{n}.ffn_gate_inp": "model.layers.{n}.block_sparse_moe.gate"}
_GPT_OSS = {
    **_COMMON,
    "blk.{n}.post_attention_norm": "model.layers.{n}.post_attention_layernorm",
    "blk.{n}.ffn_gate_inp": "model.layers.{n}.mlp.router",
    "blk.{n}.attn_sinks.weight": "model.layers.{n}.self_attn.sinks",  # a full name: HF's has no suffix
}
_QWEN_HYBRID = {
    **_COMMON,
    "blk.{n}.post_attention_norm": "model.layers.{n}.post_attention_layernorm",
}
_GLM4_MOE = {
    **_COMMON,
    "blk.{n}.post_attention_norm": "model.layers.{n}.post_attention_layernorm",
    "blk.{n}.exp_probs_b.bias": "model.layers.{n}.mlp.gate.e_score_correction_bias",
    "blk.{n}.ffn_gate_shexp": "model.layers.{n}.mlp.shared_experts.gate_proj",
    "blk.{n}.ffn_up_shexp": "model.layers.{n}.mlp.shared_experts.up_proj",
    "blk.{n}.ffn_down_shexp": "model.layers.{n}.mlp.shared_experts.down_proj",
}
# general.architecture -> (HF model_type, name table, Q/K rows permuted by the converter)
ARCHS = {
    "qwen35moe": ("qwen3_5_moe", {**_QWEN_HYBRID, **gguf_qwen35.LINEAR}, False),
    "qwen3next": ("qwen3_next", {**_QWEN_HYBRID, **gguf_qwen35.NEXT_LINEAR}, False),
    "qwen3moe": ("qwen3_moe", _COMMON, False),
    "qwen2moe": ("qwen2_moe", _COMMON, False),
    "olmoe": ("olmoe", _COMMON, False),
    "llama": ("mixtral", _MIXTRAL, True),
    "gpt-oss": ("gpt_oss", _GPT_OSS, False),
    "glm4moe": ("glm4_moe", _GLM4_MOE, False),
    "deepseek2": ("deepseek_v3", {**_COMMON, **gguf_deepseek2.TABLE}, False),
}
EXPERT_KINDS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def name_map(arch: str, gguf_names: list[str]) -> dict[str, str]:
    """HF tensor name -> GGUF tensor name for every non-expert tensor of the file."""
    table = ARCHS[arch][1]
    pats = []
    for g, h in table.items():
        rx = "^" + re.escape(g).replace(r"\{n\}", r"(?P<n>\d+)")
        # maps whole names; the others carry the suffix over
        full = g.endswith((".weight", ".bias")) or g in gguf_qwen35.BARE
        pats.append((re.compile(rx + ("$" if full else r"\.(?P<sfx>weight|bias)$")), h, full))
    out = {}
    for name in gguf_names:
        if any(k in name for k in EXPERT_KINDS):
            continue
        for rx, h, full in pats:
            if m := rx.match(name):
                hf = h.format(n=m.groupdict().get("n"))
                out[hf if full else f"{hf}.{m['sfx']}"] = name
                break
    return out


# general.architecture -> (untransform(GGUFFile) -> fix(HF name, tensor), stored_rows(GGUFFile) ->
# rows(HF name), input_order(GGUFFile) -> order(HF name) or None): the converter's other changes to
# tensors, undone (loader/gguf_qwen35.py, loader/gguf_deepseek2.py), in values, in stored rows of
# blocks and, for moved columns, in the input a kernel multiplies the stored bits by
FIXES = {
    "qwen35moe": (gguf_qwen35.untransform, gguf_qwen35.stored_rows, gguf_qwen35.input_order),
    "qwen3next": (gguf_qwen35.untransform, gguf_qwen35.stored_rows, None),
    "deepseek2": (gguf_deepseek2.untransform, gguf_deepseek2.stored_rows, None),
}


def unpermute_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's ``LlamaModel.permute`` of a Q or K projection's rows (or bias): rows
    [heads, 2, d/2] (HF: first halves, then second halves) were stored as [heads, d/2, 2] (pairs)."""
    rest = w.shape[1:]
    d = w.shape[0] // heads
    return w.reshape(heads, d // 2, 2, *rest).transpose(1, 2).reshape(w.shape)
