"""Attention over a paged KV cache for a packed batch; GQA without repeating KV, optional sinks.

``attend_paged`` is what attention layers call: a CPU forward whose sequences each decode one token runs
``ft_kernels.decode_attention`` straight over the layer's KV pools (no gather of the context into a padded
copy, no fp32 conversion of it, no mask); anything else gathers and runs ``paged_attention``.
``attend`` is the core both layouts share (paged KV here, window rings in ``attn_window.py``): torch's
fused flash kernel (GQA without repeating KV; sinks by rescaling each row with its log-sum-exp), for
prefill and decode alike; ``attend_blocked`` is the reference form (and the path where key and value
widths differ, or a torch build lacks the flash op).

Legend: T = packed tokens, B = sequences, Lq/Lk = padded query/key lengths, K = KV heads,
G = query heads per KV head (N = K * G), D = head dim, Dv = value dim.
"""

from __future__ import annotations

import logging

import ft_kernels
import torch
import torch.nn.functional as F

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.layers.batch import ForwardBatch

Q_BLOCK = 256  # queries per score block in prefill

log = logging.getLogger("ft_core.engine")


def attend(
    q: torch.Tensor,  # [B, K, G, Lq, D] float32
    k: torch.Tensor,  # [B, K, Lk, D] float32
    v: torch.Tensor,  # [B, K, Lk, Dv] float32
    mask: torch.Tensor,  # [B, Lq, Lk] bool: key visible to query (every query sees at least one key)
    scale: float,
    sinks: torch.Tensor | None = None,  # [N] per-head sink logits (GPT-OSS)
) -> torch.Tensor:  # [B, K, G, Lq, Dv] float32
    B, K, G, Lq, D = q.shape
    if v.shape[-1] == D:
        if sinks is None:
            # Fused (flash) attention: no [Lq, Lk] score tensor in memory, which bounds long prefills.
            o = F.scaled_dot_product_attention(
                q.reshape(B, K * G, Lq, D),
                k,
                v,
                attn_mask=mask[:, None],
                scale=scale,
                enable_gqa=G > 1,
            )  # B N Lq D
            return o.view(B, K, G, Lq, D)
        if q.device.type == "cpu" and _FLASH_CPU is not None:
            return _attend_sinks_fused(q, k, v, mask, scale, sinks)
    return attend_blocked(q, k, v, mask, scale, sinks)


# torch's CPU flash kernel, which also returns the log-sum-exp of each query row (a private aten op:
# absent in some torch builds, then sink models keep the blocked form).
_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _attend_sinks_fused(q, k, v, mask, scale, sinks) -> torch.Tensor:
    """Sinks on the fused kernel: softmax over [scores, sink] = the plain softmax times
    Z / (Z + e^sink) = sigmoid(lse - sink), with lse = log Z of the row. One call per KV head, its keys
    broadcast (stride 0) to the G query heads that share them. Shapes as ``attend``."""
    B, K, G, Lq, D = q.shape
    Lk = k.shape[2]
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(
        ~mask, float("-inf")
    )[:, None]  # B 1 Lq Lk
    sk = sinks.float().view(K, G, 1)
    out = []
    for h in range(K):
        o, lse = _FLASH_CPU(
            q[:, h],
            k[:, h : h + 1].expand(B, G, Lk, D),
            v[:, h : h + 1].expand(B, G, Lk, D),
            0.0,
            False,
            attn_mask=bias,
            scale=scale,
        )  # B G Lq Dv, B G Lq
        out.append(o * torch.sigmoid(lse - sk[h])[..., None])
    return torch.stack(out, dim=1)


def attend_blocked(q, k, v, mask, scale, sinks=None) -> torch.Tensor:
    """The reference form of ``attend`` (same shapes): scores per query block of Q_BLOCK, softmax with
    the sink as one more logit per head. The G query heads of a KV head and the block's queries share
    one [G * q, D] @ [D, Lk] product per KV head (4-D matmuls: a 5-D broadcast over G ran ~6x slower)."""
    B, K, G, Lq, D = q.shape
    Lk, Dv = k.shape[2], v.shape[-1]
    kt = k.transpose(-1, -2)  # B K D Lk
    m = mask[:, None, None]  # B 1 1 Lq Lk
    sk = None if sinks is None else sinks.float().view(1, K, G, 1, 1)
    out = []
    for s0 in range(0, Lq, Q_BLOCK):  # query blocks bound the score tensor to [B, N, Q_BLOCK, Lk]
        qb = q[:, :, :, s0 : s0 + Q_BLOCK]
        n = qb.shape[3]
        s = (qb.reshape(B, K, G * n, D) @ kt).view(B, K, G, n, Lk) * scale
        s = s.masked_fill(~m[:, :, :, s0 : s0 + Q_BLOCK], float("-inf"))
        if sk is not None:
            p = torch.softmax(torch.cat([s, sk.expand(*s.shape[:-1], 1)], dim=-1), dim=-1)[..., :-1]
        else:
            p = torch.softmax(s, dim=-1)
        out.append((p.reshape(B, K, G * n, Lk) @ v).view(B, K, G, n, Dv))
    return torch.cat(out, dim=3) if len(out) > 1 else out[0]


def pad_queries(q: torch.Tensor, batch: ForwardBatch, K: int) -> torch.Tensor:
    """Packed q [T, N, D] -> padded [B, K, G, Lq, D] float32 (rows past a sequence's q_len are zero)."""
    B, Lq = batch.batch_size, batch.Lq
    T, N, D = q.shape
    if Lq == 1:  # every sequence decodes one token: T == B, rows already in order, nothing to pad
        return q.view(B, K, N // K, 1, D).float()
    qb = q.new_zeros(B * Lq, N, D)
    qb[batch.dest] = q
    return qb.view(B, Lq, K, N // K, D).permute(0, 2, 3, 1, 4).float()


def unpad(o: torch.Tensor, batch: ForwardBatch, dtype: torch.dtype) -> torch.Tensor:
    """Padded [B, K, G, Lq, Dv] -> packed [T, N, Dv] in ``dtype``."""
    B, K, G, Lq, Dv = o.shape
    if Lq == 1:
        return o.reshape(B, K * G, Dv).to(dtype)
    return o.permute(0, 3, 1, 2, 4).reshape(B * Lq, K * G, Dv)[batch.dest].to(dtype)


def paged_attention(
    q: torch.Tensor,  # [T, N, D]
    k: torch.Tensor,  # [B, Lk, K, D] gathered keys (new tokens already written)
    v: torch.Tensor,  # [B, Lk, K, Dv]
    batch: ForwardBatch,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,  # [N] per-head sink logits (GPT-OSS)
) -> torch.Tensor:  # [T, N, Dv] in q's dtype
    qb = pad_queries(q, batch, k.shape[2])
    n = batch.ctx_lens[0]
    if (
        batch.batch_size == 1
        and batch.q_lens[0] == n
        and (window is None or window >= n)
        and sinks is None
        and k.shape[-1] == v.shape[-1]
    ):  # one prompt with no earlier context: plain causal, whose key blocks past the diagonal are skipped
        B, K, G, Lq, D = qb.shape
        o = F.scaled_dot_product_attention(
            qb.reshape(B, K * G, Lq, D),
            k[:, :n].transpose(1, 2).float(),
            v[:, :n].transpose(1, 2).float(),
            is_causal=True,
            scale=scale,
            enable_gqa=G > 1,
        ).view(B, K, G, Lq, D)
        return unpad(o, batch, q.dtype)
    o = attend(
        qb, k.transpose(1, 2).float(), v.transpose(1, 2).float(), batch.mask(window), scale, sinks
    )
    return unpad(o, batch, q.dtype)


def attend_paged(
    q: torch.Tensor,  # [T, N, D]
    kv: PagedKVCache,  # this forward's new keys/values already written
    layer: int,
    batch: ForwardBatch,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,  # [N] per-head sink logits (GPT-OSS)
) -> torch.Tensor:  # [T, N, Dv] in q's dtype
    """Attention of the packed queries over layer ``layer``'s paged KV. CPU forwards read the pools in place:
    decode-only ones (every sequence one new token) with ``ft_kernels.decode_attention``
    (``decode_in_place``); others, in a bf16 engine where the CPU has the kernel's SIMD build (AVX-512
    BF16), with ``ft_kernels.prefill_attention`` (its weights rounded to bf16 for the value sum, as torch's
    bf16 flash kernel does). Twin of both: the gather + ``paged_attention`` path below, which every other
    forward takes. On a GPU every forward reads the pools in place too: decode-only ones with
    ``device_decode`` (``decode_in_place``), others with ``device_prefill``."""
    kp, vp = kv.k[layer], kv.v[layer]
    if batch.Lq == 1 and in_place(q, kp, vp):
        return decode_in_place(
            q, kp, vp, batch.page_table, batch.ctx_tensor(), scale, window, sinks
        )
    if q.device.type != "cpu" and in_place(q, kp, vp) and _DEVICE_PREFILL[0]:
        try:
            return device_prefill(q, kp, vp, batch, scale, window, sinks)
        except Exception as e:  # noqa: BLE001 -- not yet run on a GPU: the gather below is the same attention
            _DEVICE_PREFILL[0] = False
            log.warning(
                "the paged prefill attention kernel failed (%s: %s); prefills gather the context",
                type(e).__name__,
                e,
            )
    if q.device.type == "cpu" and vp is not None and vp.dtype == kp.dtype:
        sk = None if sinks is None else sinks.float().contiguous()
        if (
            q.dtype == kp.dtype == torch.bfloat16
            and q.shape[-1] % 2 == 0
            and ft_kernels.prefill_attention_simd()
        ):
            o = ft_kernels.prefill_attention(
                q.contiguous(),
                kp,
                vp,
                batch.page_table,
                batch.q_lens_tensor(),
                batch.ctx_tensor(),
                scale,
                window or 0,
                sk,
            )
            return o.to(q.dtype)
    kc, vc = kv.gather(layer, batch.page_table)
    return paged_attention(q, kc, vc, batch, scale, window, sinks)


_DECODE_DTYPES = (torch.float32, torch.bfloat16)
_DEVICE_PREFILL = [True]  # False once the Triton prefill kernel failed in this process


def in_place(q: torch.Tensor, kp: torch.Tensor, vp: torch.Tensor | None) -> bool:
    """Whether ``decode_in_place`` takes these: q fp32 or bf16 and pools of one dtype, fp32 or bf16 (on the CPU)
    or q's (on a GPU: the Triton kernel's ``tl.dot`` operands)."""
    if vp is None or q.dtype not in _DECODE_DTYPES or kp.dtype != vp.dtype:
        return False
    return kp.dtype in _DECODE_DTYPES if q.device.type == "cpu" else kp.dtype == q.dtype


def decode_in_place(
    q: torch.Tensor,  # [B, N, D]: one new token a sequence
    kp: torch.Tensor,  # [P, S, K, D] a layer's key pool (this step's keys written)
    vp: torch.Tensor,  # [P, S, K, Dv]
    table: torch.Tensor,  # [B, Pmax] int64: key j of sequence b at row j % S of page table[b, j // S]
    ctx: torch.Tensor,  # [B] int64 keys of each sequence (this step's included), on q's device
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,  # [N]
) -> torch.Tensor:  # [B, N, Dv] in q's dtype
    """A decode step's attention over pools read in place (where ``in_place`` says so) by the kernel of q's
    device: ``ft_kernels.decode_attention`` on the CPU, ``device_decode`` elsewhere. Twin: the gather +
    ``paged_attention`` path."""
    if q.device.type != "cpu":
        return device_decode(q, kp, vp, table, ctx, scale, window, sinks)
    sk = None if sinks is None else sinks.float().contiguous()
    o = ft_kernels.decode_attention(q.contiguous(), kp, vp, table, ctx, scale, window or 0, sk)
    return o.to(q.dtype)


def device_decode(
    q: torch.Tensor,  # [B, N, D]: one new token a sequence
    kp: torch.Tensor,  # [P, S, K, D] a layer's key pool (this step's keys written)
    vp: torch.Tensor,  # [P, S, K, Dv]
    table: torch.Tensor,  # [B, Pmax] int64 page table
    ctx: torch.Tensor,  # [B] int64 keys of each sequence, on the device
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,  # [N]
) -> torch.Tensor:  # [B, N, Dv] in q's dtype
    """A decode step's attention by the Triton kernel (``ft_kernels.gpu.decode_attention``): the pools read in
    place page by page, the context lengths read on the device, launch shapes from the tensors' shapes alone
    (no gather whose size grows with the context; capturable). Twin: the gather + ``paged_attention`` path."""
    from ft_kernels.gpu.decode_attention import decode_attention  # Triton loads lazily

    sk = None if sinks is None else sinks.float().contiguous()
    o = decode_attention(q.contiguous(), kp, vp, table, ctx, scale, window or 0, sk)
    return o.to(q.dtype)


def device_prefill(
    q: torch.Tensor,  # [T, N, D] packed new tokens
    kp: torch.Tensor,  # [P, S, K, D] a layer's key pool (this forward's keys written)
    vp: torch.Tensor,  # [P, S, K, Dv]
    batch: ForwardBatch,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,  # [N]
) -> torch.Tensor:  # [T, N, Dv] in q's dtype
    """A prefill's or mixed step's attention on a GPU by the Triton kernel (``ft_kernels.gpu.prefill_attention``):
    the pools read in place page by page in their dtype, the causal / window mask computed in the kernel, no
    gather of the context nor [Lq, Lk] mask in memory. Twin: the gather + ``paged_attention`` path."""
    from ft_kernels.gpu.prefill_attention import prefill_attention  # Triton loads lazily

    sk = None if sinks is None else sinks.float().contiguous()
    o = prefill_attention(
        q.contiguous(), kp, vp, batch.page_table, batch.q_lens_tensor(), batch.ctx_tensor(), scale,
        window or 0, sk, max_q=batch.Lq,
    )  # fmt: skip
    return o.to(q.dtype)
