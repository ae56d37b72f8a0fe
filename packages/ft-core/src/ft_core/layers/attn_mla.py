"""DeepSeek multi-head latent attention. The KV cache holds the compressed latent per token
(normed ``kv_lora_rank`` part + rotated shared rope key), expanded per head by ``kv_b_proj`` at use in
prefill; decode tokens take the absorbed form instead (``_decode``: kv_b folded into the query and the
output, the latents read in place).

Legend: T = packed tokens, N = heads, C = kv_lora_rank, Rd = rope dims, Dn = nope dims, Dv = value dims.
"""

from __future__ import annotations

import ft_kernels
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
        kp = kv.k[self.layer]
        if (
            batch.Lq == 1
            and isinstance(self.wkvb, torch.Tensor)
            and kp.dtype in (torch.float32, torch.bfloat16)
        ):  # decode tokens only: the absorbed form over the pool in place
            return linear(self._decode(q, kp, batch).reshape(T, -1), self.wo, self.bo)
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

    def _decode(self, q: torch.Tensor, kp: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        """One new token a sequence, q [T, N, Dn + Rd] -> [T, N, Dv], in the absorbed form: each head's nope
        query taken into the latent space by kv_b's key rows (q_lat = q_nope W_UK), attention over the cached
        rows [latent, rope key] read in place (``ft_kernels.decode_attention`` on the CPU, ``device_decode``
        on a GPU; the values are the same rows, whose latent part is kept), then kv_b's value rows (o W_UV^T).
        The expanding path's q.k and p.v reassociated: no per-head key or value is made for the context,
        whose cost grew with it (N (Dn + Dv) C multiply-adds a cached token a layer)."""
        m, N = self.cfg.mla, self.cfg.num_heads
        C, Dn = m.kv_lora_rank, m.qk_nope_dim
        w = self.wkvb.view(N, Dn + m.v_head_dim, C)
        q_lat = torch.bmm(q[..., :Dn].transpose(0, 1).to(w.dtype), w[:, :Dn])  # [N, T, C]
        qf = torch.cat([q_lat.transpose(0, 1).to(q.dtype), q[..., Dn:]], dim=-1)  # [T, N, C + Rd]
        if kp.device.type == "cpu":
            o = ft_kernels.decode_attention(
                qf.float().contiguous(), kp, kp, batch.page_table, batch.ctx_tensor(),
                self.cfg.attn_scale, 0, None,
            )  # fmt: skip
        else:
            o = latent_decode(qf, kp, batch, self.cfg.attn_scale)
        o_lat = o[..., :C].transpose(0, 1).to(w.dtype)  # [N, T, C]
        return torch.bmm(o_lat, w[:, Dn:].transpose(1, 2)).transpose(0, 1)  # [T, N, Dv]


def latent_decode(
    q: torch.Tensor, kp: torch.Tensor, batch: ForwardBatch, scale: float
) -> torch.Tensor:
    """One query a sequence, q [B, N, C + Rd], over its cached rows kp [P, S, 1, C + Rd] (the rows are the
    keys and the values) -> [B, N, C + Rd] float32: the rows gathered by the page table (a row a token, not
    a key per head), scores masked by the context lengths read on the device, so a captured decode step can
    hold it (torch ops: a GPU's path; twin: ``ft_kernels.decode_attention`` with the pool as keys and values)."""
    lat = kp[batch.page_table].flatten(1, 2)[:, :, 0].float()  # [B, Lk, C + Rd]
    s = torch.einsum("bnd,bld->bnl", q.float(), lat) * scale
    keep = torch.arange(lat.shape[1], device=q.device)[None, :] < batch.ctx_tensor()[:, None]
    s = s.masked_fill(~keep[:, None, :], float("-inf"))
    return torch.softmax(s, dim=-1) @ lat
