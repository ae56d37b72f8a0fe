"""Gated full attention of the Qwen3-Next family: q_proj yields per head a query and an output gate,
(1 + w) RMSNorm on q and k per head, partial rotary, paged GQA attention, output * sigmoid(gate).

Legend: T = packed tokens, H = hidden, N = query heads, K = KV heads, D = head dim.
"""

from __future__ import annotations

import torch

from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers.attention import attend_paged
from ft_core.layers.basic import sigmoid_mul
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.dense import linear
from ft_core.layers.norm_offset import offset_rms_norm
from ft_core.layers.rope import Rotary
from ft_core.model_config import ModelConfig


class GatedAttention:
    def __init__(self, r, cfg: ModelConfig, layer: int, prefix: str, rotary: Rotary):
        self.cfg, self.layer, self.rotary = cfg, layer, rotary
        N, K, D, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
        wq, bq = r.linear(
            f"{prefix}.q_proj", 2 * N * D, H, cfg.qkv_bias
        )  # per head: D query rows, D gate rows
        wk, bk = r.linear(f"{prefix}.k_proj", K * D, H, cfg.qkv_bias)
        wv, bv = r.linear(f"{prefix}.v_proj", K * D, H, cfg.qkv_bias)
        self.wqkv = torch.cat([wq, wk, wv])
        self.bqkv = torch.cat([bq, bk, bv]) if cfg.qkv_bias else None
        self.split = (2 * N * D, K * D, K * D)
        self.wo, self.bo = r.linear(f"{prefix}.o_proj", H, N * D, cfg.o_bias)
        self.q_norm = 1 + r.tensor(f"{prefix}.q_norm.weight", (D,), torch.float32)
        self.k_norm = 1 + r.tensor(f"{prefix}.k_norm.weight", (D,), torch.float32)

    def kv_layout(self, num_pages: int, page_size: int, dtype: torch.dtype) -> KVLayout:
        c = self.cfg
        return KVLayout(num_pages, page_size, c.num_kv_heads, c.head_dim, c.head_dim, dtype)

    def __call__(
        self, x: torch.Tensor, batch: ForwardBatch, kv: PagedKVCache, cos_sin
    ) -> torch.Tensor:
        """x [T, H] -> [T, H]; writes this layer's K/V of the new tokens."""
        c, T, D = self.cfg, x.shape[0], self.cfg.head_dim
        if isinstance(self.wqkv, list):  # a GGUF's stored bits, one matrix per part (keep_native)
            qg, k, v = (linear(x, w) for w in self.wqkv)
        else:
            qg, k, v = linear(x, self.wqkv, self.bqkv).split(self.split, dim=-1)
        q, gate = qg.view(T, -1, 2 * D).split(D, dim=-1)  # [T, N, D] each
        q = offset_rms_norm(q, self.q_norm, c.rms_eps)
        k = offset_rms_norm(k.view(T, -1, D), self.k_norm, c.rms_eps)
        cos, sin = cos_sin
        q, k = self.rotary.apply(q, cos, sin), self.rotary.apply(k, cos, sin)
        kv.write(self.layer, batch.slots, k, v.view(T, -1, D))
        o = attend_paged(q, kv, self.layer, batch, D**-0.5)
        o = sigmoid_mul(o.reshape(T, -1), gate.reshape(T, -1))
        return linear(o, self.wo, self.bo)
