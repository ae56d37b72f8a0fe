"""Paged prefill attention on the device (Triton): the packed queries of a batch's chunks (each sequence's new
tokens, after any context already cached) over its paged K/V pools read in place -- no gather of the context
into a padded copy, no [Lq, Lk] mask in memory, the pools in their own dtype.

  ``_chunk``  grid (B, K, QB): sequence b, KV head kh, the qb-th block of BM of its new tokens. The G = N / K
              query heads of kh for those BM tokens are one [BM * BG, D] block of rows (row r: token r // BG,
              head r % BG); keys in blocks of BN looked up page by page, from the window's start (or 0) to the
              block's last token (causal); online softmax in fp32; the sink, one more logit a head, added to
              the denominator at the end. Rows past a sequence's new tokens, or heads past G, store nothing.

Both products are ``tl.dot`` with fp32 sums: ``ieee`` for fp32 pools; for bf16 pools ``tf32``, exact on bf16
operands (8 significant bits within tf32's 11; Triton's interpreter computes bf16 dots wrongly), the weights
rounded to bf16 for the value sum as flash kernels do. Twin: ``ft_kernels.reference.prefill_attention`` (the
CPU kernel ``ft_kernels.prefill_attention`` has the same interface). Legend: T packed new tokens, B sequences,
N query heads, K KV heads, G = N / K, D key width, Dv value width, P pages of S tokens.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ft_kernels.gpu.decode_attention import pow2, check_pools

BN = 32  # keys a block
ROWS = 64  # query rows (tokens x heads of a KV head) a program, at most; fewer for wide heads


@triton.jit
def _chunk(
    q_ptr,
    k_ptr,
    v_ptr,
    pt_ptr,
    qlen_ptr,
    ctx_ptr,
    start_ptr,
    sink_ptr,
    o_ptr,
    scale,
    window,
    pt_stride,
    S,
    K,
    G: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    BM: tl.constexpr,
    BG: tl.constexpr,
    BD: tl.constexpr,
    BDV: tl.constexpr,
    BN: tl.constexpr,
    BF16: tl.constexpr,
    PREC: tl.constexpr,
    HAS_SINK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kh = tl.program_id(1)
    m0 = tl.program_id(2) * BM
    qlen = tl.load(qlen_ptr + b)
    ctx = tl.load(ctx_ptr + b)
    t0 = tl.load(start_ptr + b)  # the sequence's first row of the packed queries
    first = ctx - qlen  # position of its first new token
    r = tl.arange(0, BM * BG)
    i = m0 + r // BG  # new token of each row
    g = r % BG
    rm = (i < qlen) & (g < G)
    qpos = first + i
    n = kh * G + g
    d = tl.arange(0, BD)
    dv = tl.arange(0, BDV)
    q = tl.load(
        q_ptr + ((t0 + i) * (K * G) + n)[:, None] * D + d[None, :],
        mask=rm[:, None] & (d < D)[None, :],
        other=0.0,
    ).to(tl.float32)
    m_i = tl.full([BM * BG], float("-inf"), tl.float32)
    l_i = tl.zeros([BM * BG], tl.float32)
    acc = tl.zeros([BM * BG, BDV], tl.float32)
    hi = tl.minimum(ctx, first + m0 + BM)  # keys up to the block's last token
    lo = ctx * 0
    if window > 0:
        lo = tl.maximum(first + m0 - window + 1, 0)
    hi = tl.where(m0 < qlen, hi, lo)  # a block past the new tokens reads nothing
    for s0 in range(lo, hi, BN):
        pos = s0 + tl.arange(0, BN)
        pm = pos < hi
        page = tl.load(pt_ptr + b * pt_stride + pos // S, mask=pm, other=0)
        row = (page * S + pos % S) * K + kh  # [BN] row of the pools viewed as [P * S * K, D]
        k = tl.load(
            k_ptr + row[:, None] * D + d[None, :], mask=pm[:, None] & (d < D)[None, :], other=0.0
        )
        s = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision=PREC)
        vis = pm[None, :] & (pos[None, :] <= qpos[:, None])
        if window > 0:
            vis = vis & (pos[None, :] > qpos[:, None] - window)
        s = tl.where(vis, s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + row[:, None] * DV + dv[None, :],
            mask=pm[:, None] & (dv < DV)[None, :],
            other=0.0,
        )
        if BF16:  # the weights rounded to bf16, as a bf16 value sum takes them
            p = p.to(tl.bfloat16).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision=PREC)
        m_i = m_new
    if HAS_SINK:
        sink = tl.load(sink_ptr + n, mask=rm, other=0.0)
        top = tl.maximum(m_i, sink)
        w = tl.exp(m_i - top)
        acc = acc * w[:, None]
        l_i = l_i * w + tl.exp(sink - top)
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        o_ptr + ((t0 + i) * (K * G) + n)[:, None] * DV + dv[None, :],
        o,
        mask=rm[:, None] & (dv < DV)[None, :],
    )


def blocks(G: int, D: int, Dv: int) -> dict:
    """``_chunk``'s block sizes for G query heads a KV head of key / value widths D / Dv: BM tokens a program,
    BM * BG rows (a power of two, at least 16 for ``tl.dot``; fewer for wide heads, whose [rows, D] blocks
    of q and sums stay in registers), BD / BDV the widths padded to powers of two."""
    BG, BD, BDV = pow2(G, 1), pow2(D), pow2(Dv)
    rows = max(16, min(ROWS, ROWS * 128 // max(BD, BDV)))
    return dict(BM=max(1, rows // BG), BG=BG, BD=BD, BDV=BDV)


def prefill_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    page_table: torch.Tensor,
    q_lens: torch.Tensor,
    ctx_lens: torch.Tensor,
    scale: float,
    window: int = 0,
    sinks: torch.Tensor | None = None,
    max_q: int | None = None,
) -> torch.Tensor:
    """q [T, N, D] (each sequence's new tokens in turn); k_pool [P, S, K, D], v_pool [P, S, K, Dv] (q's dtype:
    bf16 or fp32, contiguous, this step's keys written); page_table [B, Pmax] int64 or int32; q_lens, ctx_lens
    [B] int64 on the device (new tokens; keys with them, the new ones last); window > 0: each token sees the
    last ``window`` keys up to itself; sinks [N] fp32. ``max_q``: the largest q_len, where the caller knows it
    (else read from the device). Returns fp32 [T, N, Dv]."""
    T, N, D = q.shape
    P, S, K, _ = k_pool.shape
    Dv = v_pool.shape[-1]
    B = page_table.shape[0]
    check_pools("prefill_attention", q, k_pool, v_pool, sinks)
    if q_lens.shape != (B,) or ctx_lens.shape != (B,) or page_table.stride(1) != 1:
        raise ValueError(
            f"prefill_attention: page_table {tuple(page_table.shape)}, q_lens {tuple(q_lens.shape)}, "
            f"ctx_lens {tuple(ctx_lens.shape)} for {B} sequences"
        )
    G = N // K
    bs = blocks(G, D, Dv)
    mq = int(q_lens.max()) if max_q is None else max_q
    starts = torch.cumsum(q_lens, 0) - q_lens
    o = torch.empty(T, N, Dv, dtype=torch.float32, device=q.device)
    bf16 = q.dtype == torch.bfloat16
    sk = sinks if sinks is not None else o  # any pointer when there is no sink
    _chunk[(B, K, triton.cdiv(max(mq, 1), bs["BM"]))](
        q, k_pool, v_pool, page_table, q_lens, ctx_lens, starts, sk, o, float(scale), int(window),
        page_table.stride(0), S, K,
        G=G, D=D, DV=Dv, BN=BN, BF16=bf16, PREC="tf32" if bf16 else "ieee", HAS_SINK=sinks is not None, **bs,
    )  # fmt: skip
    return o
