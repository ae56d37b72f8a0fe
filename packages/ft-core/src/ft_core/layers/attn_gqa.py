"""Grouped-query attention layer: q/k/v/o projections (optional biases), QK-norm per head or over
the whole projection, clip_qkv, rotary (partial/yarn/interleaved), sliding window and sinks.

Legend: T = packed tokens, H = hidden, N = query heads, K = KV heads, D = head dim.
"""

from __future__ import annotations

import torch

from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers.attention import attend_paged
from ft_core.layers.attn_window import window_attention
from ft_core.layers.basic import rms_norm
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.dense import linear
from ft_core.layers.rope import Rotary
from ft_core.model_config import ModelConfig


class GQAttention:
    def __init__(
        self,
        r,
        cfg: ModelConfig,
        layer: int,
        prefix: str,
        rotary: Rotary,
        state_index: int | None = None,
    ):
        """``state_index``: this windowed layer keeps its window as per-sequence state (that state layer's
        index, ``layers/attn_window.py``) instead of paged KV."""
        self.cfg, self.layer, self.rotary, self.state_index = cfg, layer, rotary, state_index
        N, K, D, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
        wq, bq = r.linear(f"{prefix}.q_proj", N * D, H, cfg.qkv_bias)
        wk, bk = r.linear(f"{prefix}.k_proj", K * D, H, cfg.qkv_bias)
        wv, bv = r.linear(f"{prefix}.v_proj", K * D, H, cfg.qkv_bias)
        self.wqkv = torch.cat([wq, wk, wv])  # one GEMM for q, k and v
        self.bqkv = torch.cat([bq, bk, bv]) if cfg.qkv_bias else None
        self.split = (N * D, K * D, K * D)
        self.wo, self.bo = r.linear(f"{prefix}.o_proj", H, N * D, cfg.o_bias)
        self.q_norm = self.k_norm = None
        if cfg.qk_norm == "head":
            self.q_norm = r.tensor(f"{prefix}.q_norm.weight", (D,))
            self.k_norm = r.tensor(f"{prefix}.k_norm.weight", (D,))
        elif cfg.qk_norm == "full":
            self.q_norm = r.tensor(f"{prefix}.q_norm.weight", (N * D,))
            self.k_norm = r.tensor(f"{prefix}.k_norm.weight", (K * D,))
        self.sinks = r.tensor(f"{prefix}.sinks", (N,), torch.float32) if cfg.sinks else None
        self.window = cfg.sliding_windows[layer]

    def kv_layout(self, num_pages: int, page_size: int, dtype: torch.dtype) -> KVLayout:
        c = self.cfg
        if (
            self.state_index is not None
        ):  # no paged KV (zero width keeps KV indices = layer indices)
            return KVLayout(num_pages, page_size, 0, 0, 0, dtype)
        return KVLayout(num_pages, page_size, c.num_kv_heads, c.head_dim, c.head_dim, dtype)

    def __call__(
        self, x: torch.Tensor, batch: ForwardBatch, kv: PagedKVCache, cos_sin
    ) -> torch.Tensor:
        c = self.cfg
        T = x.shape[0]
        if isinstance(self.wqkv, list):  # a GGUF's stored bits, one matrix per part (keep_native)
            q, k, v = (linear(x, w) for w in self.wqkv)
        else:
            q, k, v = linear(x, self.wqkv, self.bqkv).split(self.split, dim=-1)
        if c.qk_norm == "full":
            q, k = rms_norm(q, self.q_norm, c.rms_eps), rms_norm(k, self.k_norm, c.rms_eps)
        if c.clip_qkv is not None:
            q, k, v = (t.clamp(-c.clip_qkv, c.clip_qkv) for t in (q, k, v))
        q, k, v = q.view(T, -1, c.head_dim), k.view(T, -1, c.head_dim), v.view(T, -1, c.head_dim)
        if c.qk_norm == "head":
            q, k = rms_norm(q, self.q_norm, c.rms_eps), rms_norm(k, self.k_norm, c.rms_eps)
        cos, sin = cos_sin
        q, k = self.rotary.apply(q, cos, sin), self.rotary.apply(k, cos, sin)
        if self.state_index is not None:
            o = window_attention(q, k, v, batch, self.state_index, c.attn_scale, self.sinks)
        else:
            kv.write(self.layer, batch.slots, k, v)
            o = attend_paged(q, kv, self.layer, batch, c.attn_scale, self.window, self.sinks)
        return linear(o.reshape(T, -1), self.wo, self.bo)
