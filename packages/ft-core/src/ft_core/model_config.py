"""ModelConfig: one frozen, architecture-neutral view of a checkpoint's config.json.

Every architecture module turns its ``config.json`` into this; the model code reads only this.
Legend: H = hidden, E = routed experts per layer, I = expert intermediate size.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    dim: int = 0  # rotary dims of each head (partial rotary: fewer than head_dim)
    kind: str = "default"  # default | yarn
    factor: float = 1.0
    original_max_position: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    interleaved: bool = False  # pairs (x0, x1), (x2, x3) as DeepSeek lays them; else halves (NeoX)


@dataclass(frozen=True)
class MLAConfig:
    """DeepSeek multi-head latent attention dims."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_dim: int
    qk_rope_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_dim + self.qk_rope_dim


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int  # E
    top_k: int
    intermediate: int  # I
    router: str  # "softmax" (softmax, top-k, optional renorm) | "sigmoid_group" (DeepSeek) | "topk_softmax" (GPT-OSS)
    norm_topk_prob: bool = False
    n_group: int = 1
    topk_group: int = 1
    routed_scaling: float = 1.0
    router_bias: bool = False  # GPT-OSS router bias
    score_correction_bias: bool = False  # DeepSeek e_score_correction_bias
    shared_intermediate: int = 0  # 0 = no shared expert
    shared_gate: bool = False  # Qwen2-MoE sigmoid gate on the shared expert
    act: str = "swiglu"  # "swiglu" | "gptoss" (clamped, (up + 1) * gate * sigmoid(alpha * gate))
    expert_bias: bool = False
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0


@dataclass(frozen=True)
class LinearAttnConfig:
    """Gated DeltaNet (linear attention) dims: Hk key heads of Dk, Hv value heads of Dv, conv kernel Kc."""

    k_heads: int  # Hk
    v_heads: int  # Hv (a multiple of Hk; value head h reads key head h // (Hv / Hk))
    k_dim: int  # Dk
    v_dim: int  # Dv
    conv_kernel: int  # Kc (the conv state keeps the last Kc - 1 inputs)
    grouped_proj: bool = False  # Qwen3-Next: in_proj_qkvz / in_proj_ba grouped per key head; else flat in_proj_qkv/z/b/a

    @property
    def conv_dim(self) -> int:
        """Channels of the short conv: q, k (Hk * Dk each) and v (Hv * Dv)."""
        return 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim


@dataclass(frozen=True)
class QuantConfig:
    method: str  # "fp8" | "mxfp4"
    block: tuple[int, int] | None = None  # fp8 weight_block_size (rows, cols)
    skip: tuple[str, ...] = ()  # modules_to_not_convert


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_eps: float
    max_position: int
    rope: RopeConfig
    moe: MoEConfig
    dense_intermediate: int  # dense-layer MLP size (0 if every layer is MoE)
    moe_layers: tuple[bool, ...]  # per layer: MoE (True) or dense MLP (False)
    sliding_windows: tuple[int | None, ...]  # per layer: window in tokens or None (full attention)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: str | None = (
        None  # None | "head" (per head, Qwen3/GLM) | "full" (whole projection, OLMoE)
    )
    clip_qkv: float | None = None
    sinks: bool = False
    mla: MLAConfig | None = None
    quant: QuantConfig | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)
    # Hybrid models (Qwen3-Next, Qwen3.5-MoE): per layer "attention" or "linear_attention" (empty: all attention)
    layer_types: tuple[str, ...] = ()
    linear: LinearAttnConfig | None = None
    attn_output_gate: bool = False  # q_proj also yields a per-head gate; output *= sigmoid(gate)
    norm_offset: bool = False  # RMSNorm scales by (1 + w) (Qwen3-Next family), not w

    @property
    def linear_layers(self) -> tuple[int, ...]:
        """Indices of the linear-attention (recurrent-state) layers; empty for pure attention models."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")

    def state_layers(self, window_state: bool | None = None) -> tuple[int, ...]:
        """Layers whose per-sequence state is a fixed-size slot (``cache/state_store.py``) instead of paged
        KV: every linear-attention layer, and the sliding-window layers when ``window_state`` (None: auto,
        when the model mixes windowed and full-attention layers, as GPT-OSS does: the window then lives
        in a ring of W tokens and prefixes resume only at state checkpoints)."""
        windowed = [
            i
            for i, w in enumerate(self.sliding_windows)
            if w is not None and i not in self.linear_layers
        ]
        full = [
            i
            for i, w in enumerate(self.sliding_windows)
            if w is None and i not in self.linear_layers
        ]
        if window_state is None:
            window_state = bool(windowed and full)
        return tuple(sorted(set(self.linear_layers) | (set(windowed) if window_state else set())))

    @property
    def attn_scale(self) -> float:
        """Softmax scale of q·k (DeepSeek multiplies in the yarn mscale twice)."""
        if self.mla is None:
            return self.head_dim**-0.5
        s = self.mla.qk_head_dim**-0.5
        r = self.rope
        if r.kind != "default" and r.mscale_all_dim:
            m = yarn_mscale(r.factor, r.mscale_all_dim)
            s *= m * m
        return s


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    import math

    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0
