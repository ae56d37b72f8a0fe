"""A GGUF file's hyper-parameters (``{arch}.*`` metadata, llama.cpp's keys) as the ``config.json`` dict
of the same model, so one parser (models/config_parse.py) builds the ModelConfig of either.
What the GGUF does not store, llama.cpp's graph for that architecture fixes (e.g. Qwen3-MoE
renormalises its top-k weights, OLMoE does not; GPT-OSS windows its even layers); which layers are MoE
follows from the tensors present.
"""

from __future__ import annotations

from ft_core.errors import CheckpointError, UnsupportedArchitectureError
from ft_core.loader.gguf_file import GGUFFile
from ft_core.loader import gguf_deepseek2, gguf_qwen35
from ft_core.loader.gguf_names import ARCHS


def hf_config(g: GGUFFile) -> dict:
    """The config.json dict for GGUF model ``g``; UnsupportedArchitectureError names the architecture."""
    if g.arch not in ARCHS:
        raise UnsupportedArchitectureError(
            f"{g.path}: GGUF architecture {g.arch!r} is not supported by ft's GGUF reader "
            f"(supported: {', '.join(ARCHS)})"
        )
    model_type = ARCHS[g.arch][0]
    a = g.arch_get
    n = int(a("block_count")) - int(a("nextn_predict_layers", 0))  # MTP blocks follow; ft runs none
    heads = int(a("attention.head_count"))
    moe_layers = [f"blk.{i}.ffn_gate_exps.weight" in g.tensors for i in range(n)]
    embd = g.tensor("token_embd.weight")
    d = {
        "model_type": model_type,
        "num_hidden_layers": n,
        "hidden_size": int(a("embedding_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(a("attention.head_count_kv", heads)),
        "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(a("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(a("context_length", 4096)),
        "vocab_size": int(embd.shape[0]),
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "num_experts_per_tok": int(a("expert_used_count")),
    }
    if (hd := a("attention.key_length", None)) is not None:
        d["head_dim"] = int(hd)
    if a("rope.scaling.type", "none") == "yarn":
        d["rope_scaling"] = {
            "rope_type": "yarn",
            "factor": float(a("rope.scaling.factor")),
            "original_max_position_embeddings": int(a("rope.scaling.original_context_length")),
        }
    experts = int(a("expert_count"))
    ffn = a("feed_forward_length", None)
    expert_ffn = a("expert_feed_forward_length", None)
    if model_type in ("qwen3_moe", "qwen2_moe"):
        d.update(
            num_experts=experts,
            moe_intermediate_size=int(expert_ffn),
            intermediate_size=int(ffn or 0),
            norm_topk_prob=model_type == "qwen3_moe",  # llama.cpp's qwen3moe graph renormalises
            mlp_only_layers=[i for i in range(n) if not moe_layers[i]],
        )
        if model_type == "qwen2_moe":
            d["shared_expert_intermediate_size"] = int(a("expert_shared_feed_forward_length"))
    elif model_type == "olmoe":
        d.update(num_experts=experts, intermediate_size=int(expert_ffn or ffn))
    elif model_type == "gpt_oss":  # llama.cpp: even layers windowed, yarn, softmax over the top k
        w = int(a("attention.sliding_window"))
        d.update(
            num_local_experts=experts,
            intermediate_size=int(expert_ffn or ffn),
            sliding_window=w,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)],
            attention_bias=True,
        )
        if (
            "rope_scaling" in d
        ):  # GPT-OSS's yarn: its beta values, and no rounding of the ramp's ends
            d["rope_scaling"].update(
                beta_fast=float(a("rope.scaling.yarn_beta_fast", 32.0)),
                beta_slow=float(a("rope.scaling.yarn_beta_slow", 1.0)),
                truncate=False,
            )
    elif model_type == "glm4_moe":  # llama.cpp's glm4moe graph: sigmoid routing, grouped top-k
        if int(a("expert_gating_func", 2)) != 2:
            raise CheckpointError(f"{g.path}: glm4moe.expert_gating_func must be 2 (sigmoid)")
        hd = int(d.get("head_dim") or d["hidden_size"] // heads)
        d.update(
            n_routed_experts=experts,
            moe_intermediate_size=int(expert_ffn),
            intermediate_size=int(ffn or 0),
            first_k_dense_replace=int(a("leading_dense_block_count", 0)),
            n_shared_experts=int(a("expert_shared_count", 0)),
            routed_scaling_factor=float(a("expert_weights_scale", 1.0)),
            norm_topk_prob=bool(a("expert_weights_norm", True)),
            n_group=int(a("expert_group_count", 1)),
            topk_group=int(a("expert_group_used_count", 1)),
            attention_bias="blk.0.attn_q.bias" in g.tensors,
            use_qk_norm="blk.0.attn_q_norm.weight" in g.tensors,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": d["rope_theta"],
                "partial_rotary_factor": int(a("rope.dimension_count", hd)) / hd,
            },
        )
    elif model_type == "deepseek_v3":  # MLA: key_length is llama.cpp's latent + rope width
        d.pop("head_dim", None)
        d.update(gguf_deepseek2.config(g, d, n))
    elif model_type in ("qwen3_5_moe", "qwen3_next"):
        d.update(gguf_qwen35.config(a, n))
        if model_type == "qwen3_next":
            d.update(
                intermediate_size=int(ffn or 0),
                mlp_only_layers=[i for i in range(n) if not moe_layers[i]],
            )
    else:  # mixtral, written as "llama" with experts
        d.update(num_local_experts=experts, intermediate_size=int(expert_ffn or ffn))
    return d


def generation_eos(eos_ids: list[int]) -> dict:
    """generation_config.json's part a GGUF gives: the tokenizer's end ids."""
    return {"eos_token_id": list(eos_ids)}
