"""DeepSeek multi-head latent attention. The KV cache holds the compressed latent per token
(normed ``kv_lora_rank`` part + rotated shared rope key), expanded per head by ``kv_b_proj`` at use.

Legend: T = packed tokens, N = heads, C = kv_lora_rank, Rd = rope dims, Dn = nope dims, Dv = value dims.
"""

from __future__ import annotations

import torch

from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers.attention import paged_attention
from ft_core.layers.basic import rms_norm
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.dense import linear
from ft_core.layers.rope import Rotary
from ft_core.model_config import ModelConfig


class MLAttention:
    def __init__(self, r, cfg: ModelConfig, layer: int, prefix: str, rotary: Rotary):
        self.cfg, self.layer, self.rotary = cfg, layer, rotary
        m, N, H = cfg.mla, cfg.num_heads, cfg.hidden_size
        bias = cfg.qkv_bias
        if m.q_lora_rank:
            self.wqa, self.bqa = r.linear(f"{prefix}.q_a_proj", m.q_lora_rank, H, bias)
            self.q_a_norm = r.tensor(f"{prefix}.q_a_layernorm.weight", (m.q_lora_rank,))
            self.wqb, _ = r.linear(f"{prefix}.q_b_proj", N * m.qk_head_dim, m.q_lora_rank)
        else:
            self.wq, _ = r.linear(f"{prefix}.q_proj", N * m.qk_head_dim, H)
        self.wkva, self.bkva = r.linear(
            f"{prefix}.kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_dim, H, bias
        )
        self.kv_a_norm = r.tensor(f"{prefix}.kv_a_layernorm.weight", (m.kv_lora_rank,))
        self.wkvb, _ = r.linear(
            f"{prefix}.kv_b_proj", N * (m.qk_nope_dim + m.v_head_dim), m.kv_lora_rank
        )
        self.wo, self.bo = r.linear(f"{prefix}.o_proj", H, N * m.v_head_dim, cfg.o_bias)

    def kv_layout(self, num_pages: int, page_size: int, dtype: torch.dtype) -> KVLayout:
        m = self.cfg.mla
        return KVLayout(num_pages, page_size, 1, m.kv_lora_rank + m.qk_rope_dim, 0, dtype)

    def __call__(
        self, x: torch.Tensor, batch: ForwardBatch, kv: PagedKVCache, cos_sin
    ) -> torch.Tensor:
        c, m = self.cfg, self.cfg.mla
        T, N = x.shape[0], c.num_heads
        if m.q_lora_rank:
            q = linear(rms_norm(linear(x, self.wqa, self.bqa), self.q_a_norm, c.rms_eps), self.wqb)
        else:
            q = linear(x, self.wq)
        q = q.view(T, N, m.qk_head_dim)
        ckv = linear(x, self.wkva, self.bkva)
        latent, k_rot = ckv[:, : m.kv_lora_rank], ckv[:, m.kv_lora_rank :]
        latent = rms_norm(latent, self.kv_a_norm, c.rms_eps)
        cos, sin = cos_sin
        q_rot = self.rotary.apply(q[..., m.qk_nope_dim :], cos, sin)
        k_rot = self.rotary.apply(k_rot[:, None, :], cos, sin)[:, 0]
        q = torch.cat([q[..., : m.qk_nope_dim], q_rot], dim=-1)
        kv.write(self.layer, batch.slots, torch.cat([latent, k_rot], dim=-1)[:, None, :], None)
        lat, _ = kv.gather(self.layer, batch.page_table)  # [B, Lk, 1, C + Rd]
        B, Lk = lat.shape[:2]
        kvb = linear(lat[:, :, 0, : m.kv_lora_rank], self.wkvb).view(
            B, Lk, N, m.qk_nope_dim + m.v_head_dim
        )
        k_nope, v = kvb[..., : m.qk_nope_dim], kvb[..., m.qk_nope_dim :]
        k = torch.cat(
            [k_nope, lat[:, :, :, m.kv_lora_rank :].expand(B, Lk, N, m.qk_rope_dim)], dim=-1
        )
        o = paged_attention(q, k, v, batch, c.attn_scale, None, None)
        return linear(o.reshape(T, -1), self.wo, self.bo)
