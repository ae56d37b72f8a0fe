"""Attention over a paged KV cache for a packed batch; GQA without repeating KV, optional sinks.

Prefill (and mixed) batches without sinks run torch's fused scaled_dot_product_attention (GQA without
repeating KV, flash kernel on CPU); decode and sink models run the blocked reference below.

Legend: T = packed tokens, B = sequences, Lq/Lk = padded query/key lengths, K = KV heads,
G = query heads per KV head (N = K * G), D = head dim, Dv = value dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ft_core.layers.batch import ForwardBatch

Q_BLOCK = 256  # queries per score block in prefill


def paged_attention(
    q: torch.Tensor,  # [T, N, D]
    k: torch.Tensor,  # [B, Lk, K, D] gathered keys (new tokens already written)
    v: torch.Tensor,  # [B, Lk, K, Dv]
    batch: ForwardBatch,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,  # [N] per-head sink logits (GPT-OSS)
) -> torch.Tensor:  # [T, N, Dv] in q's dtype
    B, Lq = batch.batch_size, batch.Lq
    T, N, D = q.shape
    K = k.shape[2]
    G = N // K
    qb = q.new_zeros(B * Lq, N, D)
    qb[batch.dest] = q
    qb = qb.view(B, Lq, K, G, D).permute(0, 2, 3, 1, 4).float()  # B K G Lq D
    kb = k.permute(0, 2, 3, 1).float()[:, :, None]  # B K 1 D Lk
    vb = v.permute(0, 2, 1, 3).float()[:, :, None]  # B K 1 Lk Dv
    mask = batch.mask(window)[:, None, None]  # B 1 1 Lq Lk
    if sinks is None and v.shape[-1] == D and Lq > 1:
        # Fused (flash) attention: no [Lq, Lk] score tensor in memory, which bounds long prefills.
        o = F.scaled_dot_product_attention(qb.reshape(B, N, Lq, D), kb[:, :, 0].transpose(-1, -2), vb[:, :, 0],
                                           attn_mask=mask[:, :, 0], scale=scale, enable_gqa=G > 1)  # B N Lq D
        o = o.view(B, K, G, Lq, D).permute(0, 3, 1, 2, 4).reshape(B * Lq, N, -1)[batch.dest]
        return o.to(q.dtype)
    sk = None if sinks is None else sinks.float().view(1, K, G, 1, 1)
    out = []
    for s0 in range(0, Lq, Q_BLOCK):  # query blocks bound the score tensor to [B, N, Q_BLOCK, Lk]
        s = (qb[:, :, :, s0 : s0 + Q_BLOCK] @ kb) * scale  # B K G q Lk
        s = s.masked_fill(~mask[:, :, :, s0 : s0 + Q_BLOCK], float("-inf"))
        if sk is not None:
            p = torch.softmax(torch.cat([s, sk.expand(*s.shape[:-1], 1)], dim=-1), dim=-1)[..., :-1]
        else:
            p = torch.softmax(s, dim=-1)
        out.append(p @ vb)  # B K G q Dv
    o = torch.cat(out, dim=3) if len(out) > 1 else out[0]
    o = o.permute(0, 3, 1, 2, 4).reshape(B * Lq, N, -1)[batch.dest]
    return o.to(q.dtype)
