"""Types and ranges of the config.json fields ft reads, checked as they are read
(``config_reader.HubConfig``), and the cross-field limits of the parsed ModelConfig. Every error names
the file and the field:

    config.json: 'hidden_size' must be a positive integer, got 'sixty-four'

Integral floats (``64.0``) are taken as integers and 0/1 as booleans, as Python-written configs
have them; strings, lists, ``true`` for a count or a negative size are refused.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ft_core.errors import CheckpointError
from ft_core.model_config import ModelConfig

_MAX_INT = 2**31 - 1  # dims and counts beyond int32 are corrupt, not a model

_POS_INT = (
    "vocab_size hidden_size num_hidden_layers num_attention_heads num_key_value_heads head_dim "
    "max_position_embeddings num_experts_per_tok moe_intermediate_size decoder_sparse_step "
    "full_attention_interval linear_num_key_heads linear_num_value_heads linear_key_head_dim "
    "linear_value_head_dim linear_conv_kernel_dim kv_lora_rank qk_nope_head_dim qk_rope_head_dim "
    "v_head_dim q_lora_rank n_group topk_group original_max_position_embeddings"
).split()
_NONNEG_INT = (
    "num_experts num_local_experts n_routed_experts intermediate_size "
    "shared_expert_intermediate_size "
    "n_shared_experts first_k_dense_replace max_window_layers sliding_window"
).split()
_POS_FLOAT = (
    "rms_norm_eps rope_theta routed_scaling_factor swiglu_alpha swiglu_limit clip_qkv"
).split()
_BOOL = (
    "tie_word_embeddings attention_bias norm_topk_prob use_sliding_window use_qk_norm "
    "rope_interleave"
).split()
_DICT = "rope_parameters rope_scaling quantization_config text_config".split()

KINDS: dict[str, str] = {
    **{k: "pos_int" for k in _POS_INT},
    **{k: "nonneg_int" for k in _NONNEG_INT},
    **{k: "pos_float" for k in _POS_FLOAT},
    **{k: "bool" for k in _BOOL},
    **{k: "dict" for k in _DICT},
    "partial_rotary_factor": "fraction",
    "model_type": "str",
    "bos_token_id": "token",
    "eos_token_id": "tokens",
    "layer_types": "str_list",
    "mlp_only_layers": "int_list",
}

_WANT = {
    "pos_int": "a positive integer",
    "nonneg_int": "a non-negative integer",
    "pos_float": "a positive finite number",
    "fraction": "a number in (0, 1]",
    "bool": "true or false",
    "dict": "a JSON object",
    "str": "a string",
    "token": "a non-negative integer token id",
    "tokens": "a token id or a list of token ids",
    "str_list": "a list of strings",
    "int_list": "a list of non-negative integers",
}


def _int(v: Any, lo: int) -> int | None:
    """v as an int >= lo (integral floats accepted), or None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
        return None
    return int(v) if lo <= v <= _MAX_INT else None


def _ok(kind: str, v: Any) -> bool:
    if kind in ("pos_int", "nonneg_int", "token"):
        return _int(v, 1 if kind == "pos_int" else 0) is not None
    if kind in ("pos_float", "fraction"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            return False
        return kind == "pos_float" or v <= 1
    if kind == "bool":
        return isinstance(v, bool) or (isinstance(v, int) and v in (0, 1))
    if kind == "dict":
        return isinstance(v, dict)
    if kind == "str":
        return isinstance(v, str)
    if kind == "tokens":
        return _ok("token", v) or (isinstance(v, list) and all(_ok("token", t) for t in v))
    if kind == "str_list":
        return isinstance(v, list) and all(isinstance(t, str) for t in v)
    if kind == "int_list":
        return isinstance(v, list) and all(_ok("nonneg_int", t) for t in v)
    return True


def check_field(path: Path, key: str, value: Any, kind: str | None) -> Any:
    """``value`` of config.json field ``key`` if it is of ``kind`` (None: unchecked); else
    CheckpointError."""
    if kind is not None and not _ok(kind, value):
        raise CheckpointError(f"{path}: {key!r} must be {_WANT[kind]}, got {value!r:.80}")
    return value


def check_model(mc: ModelConfig, path: Path, key_of) -> ModelConfig:
    """Limits between fields of the parsed config (``key_of(*names)``: the first of ``names``
    that config.json holds, to name it in the error)."""

    def bad(msg: str):
        raise CheckpointError(f"{path}: {msg}")

    if mc.num_heads % mc.num_kv_heads:
        bad(
            f"'num_attention_heads' ({mc.num_heads}) must be a multiple of 'num_key_value_heads' "
            f"({mc.num_kv_heads})"
        )
    if mc.head_dim < 1:
        bad(
            f"'hidden_size' ({mc.hidden_size}) // 'num_attention_heads' ({mc.num_heads}) gives "
            "head_dim 0; set 'head_dim'"
        )
    if len(mc.sliding_windows) != mc.num_layers:
        bad(
            f"'layer_types' lists {len(mc.sliding_windows)} layers but 'num_hidden_layers' is "
            f"{mc.num_layers}"
        )
    m, experts = mc.moe, key_of("num_experts", "num_local_experts", "n_routed_experts")
    if any(mc.moe_layers):
        if m.num_experts < 1:
            bad(f"{experts!r} must be at least 1 for a model with MoE layers, got {m.num_experts}")
        if not 1 <= m.top_k <= m.num_experts:
            bad(
                f"'num_experts_per_tok' ({m.top_k}) must be between 1 and {experts!r} "
                f"({m.num_experts})"
            )
        if m.intermediate < 1:
            inter = key_of("moe_intermediate_size", "intermediate_size")
            bad(f"the expert intermediate size ({inter!r}) must be positive")
        if m.n_group > 1 and (m.num_experts % m.n_group or not 1 <= m.topk_group <= m.n_group):
            bad(
                f"'n_group' ({m.n_group}) must divide {experts!r} ({m.num_experts}) and "
                f"'topk_group' ({m.topk_group}) must be between 1 and 'n_group'"
            )
    if not all(mc.moe_layers) and mc.dense_intermediate < 1:
        bad("'intermediate_size' must be positive: the model has dense MLP layers")
    return mc
