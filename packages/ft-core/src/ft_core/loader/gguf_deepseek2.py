"""DeepSeek-V3-style models (GGUF architecture ``deepseek2``: DeepSeek-V3 / R1 and files of their layout;
Kimi-K2's "kimi-k2" pre-tokenizer ft does not reproduce yet):
llama.cpp's names for multi-head latent attention, the config from its keys, and the one change its
converter (``conversion/deepseek.py``, DeepseekV2Model) makes to a tensor, undone:

- ``kv_b_proj`` [N (nope + v), kv_lora] is stored split for the absorbed attention as ``attn_k_b``
  [N, kv_lora, nope] (transposed) and ``attn_v_b`` [N, v, kv_lora]        -> joined again
  (older files keep ``attn_kv_b`` whole: read as it is)

What the file does not store follows llama.cpp's deepseek2 graph and DeepSeek-V3's config: sigmoid
routing with the score-correction bias (``exp_probs_b``; a file without it is DeepSeek-V2's softmax
routing, refused), yarn's ``mscale`` 1 (``mscale_all_dim`` = ``rope.scaling.yarn_log_multiplier`` / 0.1).

Legend: N heads, nope / rope / v the per-head dims, kv_lora the latent width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ft_core.errors import CheckpointError

# GGUF name (without ".weight" / ".bias") -> HF module name, "{n}" the block number
TABLE = {
    "blk.{n}.attn_q_a": "model.layers.{n}.self_attn.q_a_proj",
    "blk.{n}.attn_q_a_norm": "model.layers.{n}.self_attn.q_a_layernorm",
    "blk.{n}.attn_q_b": "model.layers.{n}.self_attn.q_b_proj",
    "blk.{n}.attn_kv_a_mqa": "model.layers.{n}.self_attn.kv_a_proj_with_mqa",
    "blk.{n}.attn_kv_a_norm": "model.layers.{n}.self_attn.kv_a_layernorm",
    "blk.{n}.attn_kv_b": "model.layers.{n}.self_attn.kv_b_proj",
    "blk.{n}.attn_k_b": "model.layers.{n}.self_attn.kv_b_proj",  # joined with attn_v_b
    "blk.{n}.exp_probs_b.bias": "model.layers.{n}.mlp.gate.e_score_correction_bias",
    "blk.{n}.ffn_gate_shexp": "model.layers.{n}.mlp.shared_experts.gate_proj",
    "blk.{n}.ffn_up_shexp": "model.layers.{n}.mlp.shared_experts.up_proj",
    "blk.{n}.ffn_down_shexp": "model.layers.{n}.mlp.shared_experts.down_proj",
}


def config(g, d: dict, n: int) -> dict:
    """config.json fields of a ``deepseek2`` file beyond the common ones ``d`` (``n`` layers)."""
    a = g.arch_get
    gating = int(a("expert_gating_func", 0))
    has_bias = any(k.endswith(".exp_probs_b.bias") for k in g.tensors)
    if gating == 1 or (gating == 0 and not has_bias):
        raise CheckpointError(
            f"{g.path}: deepseek2 with softmax expert gating (DeepSeek-V2 / V2.5) is not supported; "
            "ft reads the DeepSeek-V3 family (sigmoid gating with exp_probs_b)"
        )
    rope = int(a("rope.dimension_count"))
    out = {
        "num_key_value_heads": d["num_attention_heads"],  # stored as 1: llama.cpp's MQA view of MLA
        "n_routed_experts": int(a("expert_count")),
        "moe_intermediate_size": int(a("expert_feed_forward_length")),
        "intermediate_size": int(a("feed_forward_length", 0)),
        "first_k_dense_replace": int(a("leading_dense_block_count", 0)),
        "n_shared_experts": int(a("expert_shared_count", 0)),
        "routed_scaling_factor": float(a("expert_weights_scale", 1.0)),
        "norm_topk_prob": bool(a("expert_weights_norm", False)),
        "n_group": int(a("expert_group_count", 1)),
        "topk_group": int(a("expert_group_used_count", 1)),
        "q_lora_rank": int(q) if (q := a("attention.q_lora_rank", None)) else None,
        "kv_lora_rank": int(a("attention.kv_lora_rank")),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": int(a("attention.key_length_mla")) - rope,
        "v_head_dim": int(a("attention.value_length_mla")),
    }
    if "rope_scaling" in d:  # yarn
        d["rope_scaling"].update(
            beta_fast=float(a("rope.scaling.yarn_beta_fast", 32.0)),
            beta_slow=float(a("rope.scaling.yarn_beta_slow", 1.0)),
            mscale=1.0,
            mscale_all_dim=float(a("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1,
        )
    return out


def untransform(g) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """(HF name, tensor as stored) -> tensor as Hugging Face stores it, for file ``g``."""

    def fix(name: str, t: torch.Tensor) -> torch.Tensor:
        if not name.endswith("kv_b_proj.weight"):
            return t
        n = name.split(".")[2]  # model.layers.N.self_attn.kv_b_proj.weight
        if f"blk.{n}.attn_kv_b.weight" in g.tensors:  # stored whole
            return t
        v = g.tensor(f"blk.{n}.attn_v_b.weight").to_torch(t.dtype).to(t.dtype)  # [N, v, kv_lora]
        k = t.transpose(1, 2)  # [N, kv_lora, nope] -> [N, nope, kv_lora]
        return torch.cat([k, v], 1).reshape(-1, t.shape[1])

    return fix


def stored_rows(g) -> Callable[[str], slice | None]:
    """HF name -> ``slice(None)`` where the stored bits are the HF matrix, None for kv_b_proj (joined)."""
    return lambda name: None if name.endswith("kv_b_proj.weight") else slice(None)
