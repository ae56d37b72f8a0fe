"""config.json -> ModelConfig for every supported architecture (real hub field names).

Both the transformers-5 layout (``rope_parameters``) and the older hub layout (``rope_theta`` +
``rope_scaling``) are accepted. A missing required field, or one of the wrong type or range
(``config_fields.py``), is named in the error with the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ft_core.errors import CheckpointError, UnsupportedArchitectureError
from ft_core.models.config_fields import check_field, check_model
from ft_core.models.config_reader import HubConfig, eos_of, quant_of, rope_of
from ft_core.model_config import (
    LinearAttnConfig,
    MLAConfig,
    ModelConfig,
    MoEConfig,
)


def _base(
    c: HubConfig, *, moe: MoEConfig, moe_layers, windows, head_dim=None, rope=None, **kw
) -> ModelConfig:
    n_layers = int(c.req("num_hidden_layers"))
    heads = int(c.req("num_attention_heads"))
    hd = int(head_dim or c.get("head_dim") or c.req("hidden_size") // heads)
    return ModelConfig(
        model_type=c.req("model_type"),
        vocab_size=int(c.req("vocab_size")),
        hidden_size=int(c.req("hidden_size")),
        num_layers=n_layers,
        num_heads=heads,
        num_kv_heads=int(c.get("num_key_value_heads", heads)),
        head_dim=hd,
        rms_eps=float(c.get("rms_norm_eps", 1e-6)),
        max_position=int(c.get("max_position_embeddings", 4096)),
        rope=rope or rope_of(c, hd),
        moe=moe,
        dense_intermediate=int(c.get("intermediate_size", 0)),
        moe_layers=tuple(moe_layers),
        sliding_windows=tuple(windows),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        quant=quant_of(c),
        bos_token_id=c.get("bos_token_id"),
        eos_token_ids=eos_of(c),
        **kw,
    )


def _qwen_sparse_layers(c: HubConfig) -> list[bool]:
    n, step, only = (
        int(c.req("num_hidden_layers")),
        int(c.get("decoder_sparse_step", 1)),
        set(c.get("mlp_only_layers", [])),
    )
    return [
        (i not in only) and int(c.req("num_experts")) > 0 and (i + 1) % step == 0 for i in range(n)
    ]


def _windows(c: HubConfig, default_on: bool) -> list[int | None]:
    n = int(c.req("num_hidden_layers"))
    w = c.get("sliding_window")
    if not w or not c.get("use_sliding_window", default_on):
        return [None] * n
    types = c.get("layer_types")
    if types:
        return [int(w) if t == "sliding_attention" else None for t in types]
    if c.get("max_window_layers") is not None and c.get("use_sliding_window", False):
        return [int(w) if i >= int(c.get("max_window_layers")) else None for i in range(n)]
    return [int(w)] * n


def _qwen_moe(c: HubConfig, *, qwen2: bool) -> ModelConfig:
    moe = MoEConfig(
        num_experts=int(c.req("num_experts")),
        top_k=int(c.req("num_experts_per_tok")),
        intermediate=int(c.req("moe_intermediate_size")),
        router="softmax",
        norm_topk_prob=bool(c.get("norm_topk_prob", not qwen2)),
        shared_intermediate=int(c.get("shared_expert_intermediate_size", 0)) if qwen2 else 0,
        shared_gate=qwen2,
    )
    return _base(
        c,
        moe=moe,
        moe_layers=_qwen_sparse_layers(c),
        windows=_windows(c, False),
        qkv_bias=qwen2 or bool(c.get("attention_bias", False)),
        o_bias=not qwen2 and bool(c.get("attention_bias", False)),
        qk_norm=None if qwen2 else "head",
    )


def _mixtral(c: HubConfig) -> ModelConfig:
    moe = MoEConfig(
        num_experts=int(c.req("num_local_experts")),
        top_k=int(c.req("num_experts_per_tok")),
        intermediate=int(c.req("intermediate_size")),
        router="softmax",
        norm_topk_prob=True,
    )
    n = int(c.req("num_hidden_layers"))
    return _base(c, moe=moe, moe_layers=[True] * n, windows=_windows(c, True))


def _olmoe(c: HubConfig) -> ModelConfig:
    moe = MoEConfig(
        num_experts=int(c.req("num_experts")),
        top_k=int(c.req("num_experts_per_tok")),
        intermediate=int(c.req("intermediate_size")),
        router="softmax",
        norm_topk_prob=bool(c.get("norm_topk_prob", False)),
    )
    n = int(c.req("num_hidden_layers"))
    return _base(
        c,
        moe=moe,
        moe_layers=[True] * n,
        windows=[None] * n,
        qk_norm="full",
        clip_qkv=c.get("clip_qkv"),
        qkv_bias=bool(c.get("attention_bias", False)),
        o_bias=bool(c.get("attention_bias", False)),
    )


def _deepseek_like(c: HubConfig, *, mla: bool) -> ModelConfig:
    n = int(c.req("num_hidden_layers"))
    k = int(c.get("first_k_dense_replace", 0))
    moe = MoEConfig(
        num_experts=int(c.req("n_routed_experts")),
        top_k=int(c.req("num_experts_per_tok")),
        intermediate=int(c.req("moe_intermediate_size")),
        router="sigmoid_group",
        norm_topk_prob=bool(c.get("norm_topk_prob", True)),
        n_group=int(c.get("n_group", 1)),
        topk_group=int(c.get("topk_group", 1)),
        routed_scaling=float(c.get("routed_scaling_factor", 1.0)),
        score_correction_bias=True,
        shared_intermediate=int(c.req("moe_intermediate_size")) * int(c.get("n_shared_experts", 0)),
    )
    kw: dict = {}
    if mla:
        m = MLAConfig(
            q_lora_rank=c.get("q_lora_rank"),
            kv_lora_rank=int(c.req("kv_lora_rank")),
            qk_nope_dim=int(c.req("qk_nope_head_dim")),
            qk_rope_dim=int(c.req("qk_rope_head_dim")),
            v_head_dim=int(c.req("v_head_dim")),
        )
        kw = dict(
            mla=m,
            head_dim=m.qk_rope_dim,
            rope=rope_of(c, m.qk_rope_dim, interleaved=bool(c.get("rope_interleave", True))),
            qkv_bias=bool(c.get("attention_bias", False)),
            o_bias=bool(c.get("attention_bias", False)),
        )
    else:
        hd = int(c.get("head_dim") or c.req("hidden_size") // int(c.req("num_attention_heads")))
        kw = dict(
            rope=rope_of(c, hd, default_partial=0.5),
            qkv_bias=bool(c.get("attention_bias", False)),
            qk_norm="head" if c.get("use_qk_norm", False) else None,
        )
    return _base(c, moe=moe, moe_layers=[i >= k for i in range(n)], windows=[None] * n, **kw)


def _gpt_oss(c: HubConfig) -> ModelConfig:
    n = int(c.req("num_hidden_layers"))
    moe = MoEConfig(
        num_experts=int(c.req("num_local_experts")),
        top_k=int(c.req("num_experts_per_tok")),
        intermediate=int(c.req("intermediate_size")),
        router="topk_softmax",
        router_bias=True,
        act="gptoss",
        expert_bias=True,
        swiglu_alpha=float(c.get("swiglu_alpha", 1.702)),
        swiglu_limit=float(c.get("swiglu_limit", 7.0)),
    )
    types = c.get("layer_types") or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)
    ]
    w = int(c.get("sliding_window", 128))
    windows = [w if t == "sliding_attention" else None for t in types]
    bias = bool(c.get("attention_bias", True))
    return _base(
        c, moe=moe, moe_layers=[True] * n, windows=windows, sinks=True, qkv_bias=bias, o_bias=bias
    )


def _qwen_hybrid(c: HubConfig, *, next_: bool) -> ModelConfig:
    """Qwen3-Next / Qwen3.5-MoE: Gated DeltaNet layers between gated full-attention layers, (1 + w) norms,
    softmax routing with a sigmoid-gated shared expert. Qwen3.5-MoE always renormalises the top-k."""
    n = int(c.req("num_hidden_layers"))
    types = c.get("layer_types") or [
        "full_attention"
        if (i + 1) % int(c.get("full_attention_interval", 4)) == 0
        else "linear_attention"
        for i in range(n)
    ]
    if len(types) != n or not set(types) <= {"full_attention", "linear_attention"}:
        raise CheckpointError(
            f"{c.path}: layer_types must list full_attention/linear_attention for {n} layers"
        )
    moe = MoEConfig(
        num_experts=int(c.req("num_experts")),
        top_k=int(c.req("num_experts_per_tok")),
        intermediate=int(c.req("moe_intermediate_size")),
        router="softmax",
        norm_topk_prob=bool(c.get("norm_topk_prob", True)) if next_ else True,
        shared_intermediate=int(c.get("shared_expert_intermediate_size", 0)),
        shared_gate=True,
    )
    sparse = _qwen_sparse_layers(c) if next_ else [True] * n
    linear = LinearAttnConfig(
        k_heads=int(c.req("linear_num_key_heads")),
        v_heads=int(c.req("linear_num_value_heads")),
        k_dim=int(c.req("linear_key_head_dim")),
        v_dim=int(c.req("linear_value_head_dim")),
        conv_kernel=int(c.get("linear_conv_kernel_dim", 4)),
        grouped_proj=next_,
    )
    if linear.v_heads % linear.k_heads:
        raise CheckpointError(
            f"{c.path}: linear_num_value_heads must be a multiple of linear_num_key_heads"
        )
    hd = int(c.get("head_dim") or c.req("hidden_size") // int(c.req("num_attention_heads")))
    bias = bool(c.get("attention_bias", False))
    return _base(
        c,
        moe=moe,
        moe_layers=sparse,
        windows=[None] * n,
        rope=rope_of(c, hd, default_partial=0.25),
        qkv_bias=bias,
        o_bias=bias,
        qk_norm="head",
        norm_offset=True,
        attn_output_gate=True,
        layer_types=tuple("attention" if t == "full_attention" else t for t in types),
        linear=linear,
    )


def _text_part(d: dict) -> dict:
    """The language model's config of a vision-language checkpoint (``text_config``), with the wrapper's
    fields (eos ids, tied embeddings) where the text part has none; the model_type stays the wrapper's."""
    text = dict(d.get("text_config") or {})
    for k, v in d.items():
        if k not in ("text_config", "vision_config") and text.get(k) is None:
            text[k] = v
    text["model_type"] = d.get("model_type")
    return text


PARSERS: dict[str, Callable[[HubConfig], ModelConfig]] = {
    "qwen3_next": lambda c: _qwen_hybrid(c, next_=True),
    "qwen3_5_moe": lambda c: _qwen_hybrid(c, next_=False),
    "qwen3_5_moe_text": lambda c: _qwen_hybrid(c, next_=False),
    "qwen3_moe": lambda c: _qwen_moe(c, qwen2=False),
    "qwen2_moe": lambda c: _qwen_moe(c, qwen2=True),
    "mixtral": _mixtral,
    "olmoe": _olmoe,
    "deepseek_v3": lambda c: _deepseek_like(c, mla=True),
    "glm4_moe": lambda c: _deepseek_like(c, mla=False),
    "gpt_oss": _gpt_oss,
}


def parse_config(d: dict, path: Path) -> ModelConfig:
    """config.json (parsed) -> ModelConfig; CheckpointError naming ``path`` and the field."""
    if not isinstance(d, dict):
        raise CheckpointError(f"{path}: must be a JSON object, got a {type(d).__name__}")
    if d.get("text_config") is not None:
        check_field(path, "text_config", d["text_config"], "dict")
        d = _text_part(d)
    c = HubConfig(d, path)
    mt = d.get("model_type")
    if not isinstance(mt, str) or mt not in PARSERS:
        raise UnsupportedArchitectureError(
            f"{path}: model_type {mt!r} is not supported; supported: {', '.join(sorted(PARSERS))}"
        )
    try:
        mc = PARSERS[mt](c)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:  # rope, quant, ...
        raise CheckpointError(f"{path}: malformed field ({type(e).__name__}: {e})") from e
    return check_model(mc, path, c.key_of)
