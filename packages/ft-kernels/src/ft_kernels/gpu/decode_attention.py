"""Paged decode attention on the device (Triton): one new query per sequence over its paged K/V pools read in
place, in launches whose shapes depend on the tensors' shapes alone (capturable in a CUDA graph and replayed
while contexts grow: each sequence's length is read on the device).

  ``_span``   grid (B, K, NS): sequence b, KV head kh, split sp. The G = N / K query heads sharing kh against
              the sp-th of NS equal spans of the visible keys (the last ``window`` ones, or all), keys in blocks
              of BN looked up page by page; online softmax in fp32; partial (max, sum, weighted values) out.
  ``_merge``  grid (B, N): the NS partials of a head rescaled to their common max (and the sink, one more
              logit, added to the denominator); a head with no key and no sink gives 0 (a padded batch row).

Both products are ``tl.dot`` in fp32 with fp32 sums: ``ieee`` for fp32 pools; for bf16 pools ``tf32``, exact on
bf16 operands (8 significant bits within tf32's 11: the tensor cores' products as a bf16 dot's, which
Triton's interpreter gets wrong), the weights rounded to bf16 for the value sum as flash kernels do.
Twin: ``ft_kernels.reference.decode_attention``. Legend: B sequences, N query heads, K KV heads, G = N / K,
D key width, Dv value width, P pages of S tokens, NS splits of a context.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BN = 32  # keys a block
SPAN_KEYS = 256  # keys a split of the longest context the page table holds
MAX_SPLITS = 64


@triton.jit
def _span(
    q_ptr,
    k_ptr,
    v_ptr,
    pt_ptr,
    ctx_ptr,
    m_ptr,
    l_ptr,
    acc_ptr,
    scale,
    window,
    pt_stride,
    S,
    K,
    G: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    NS: tl.constexpr,
    BG: tl.constexpr,
    BD: tl.constexpr,
    BDV: tl.constexpr,
    BN: tl.constexpr,
    BF16: tl.constexpr,
    PREC: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kh = tl.program_id(1)
    sp = tl.program_id(2)
    ctx = tl.load(ctx_ptr + b)
    lo = ctx * 0
    if window > 0:
        lo = tl.maximum(ctx - window, 0)
    per = tl.cdiv(tl.cdiv(ctx - lo, NS), BN) * BN  # keys a split, whole blocks
    start = lo + sp * per
    end = tl.minimum(start + per, ctx)
    g = tl.arange(0, BG)
    gm = g < G
    d = tl.arange(0, BD)
    dv = tl.arange(0, BDV)
    n = kh * G + g
    qm = gm[:, None] & (d < D)[None, :]
    q = tl.load(q_ptr + (b * (K * G) + n)[:, None] * D + d[None, :], mask=qm, other=0.0).to(
        tl.float32
    )
    m_i = tl.full([BG], float("-inf"), tl.float32)
    l_i = tl.zeros([BG], tl.float32)
    acc = tl.zeros([BG, BDV], tl.float32)
    for s0 in range(start, end, BN):
        pos = s0 + tl.arange(0, BN)
        pm = pos < end
        page = tl.load(pt_ptr + b * pt_stride + pos // S, mask=pm, other=0)
        row = (page * S + pos % S) * K + kh  # [BN] row of the pools viewed as [P * S * K, D]
        k = tl.load(
            k_ptr + row[:, None] * D + d[None, :], mask=pm[:, None] & (d < D)[None, :], other=0.0
        )
        s = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision=PREC)
        s = tl.where(pm[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + row[:, None] * DV + dv[None, :],
            mask=pm[:, None] & (dv < DV)[None, :],
            other=0.0,
        )
        if BF16:  # the weights rounded to bf16, as a bf16 value sum takes them
            p = p.to(tl.bfloat16).to(tl.float32)
        pv = tl.dot(p, v.to(tl.float32), input_precision=PREC)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    part = ((b * K + kh) * NS + sp) * G + g  # [BG] partial of each head
    tl.store(m_ptr + part, m_i, mask=gm)
    tl.store(l_ptr + part, l_i, mask=gm)
    tl.store(acc_ptr + part[:, None] * DV + dv[None, :], acc, mask=gm[:, None] & (dv < DV)[None, :])


@triton.jit
def _merge(
    m_ptr,
    l_ptr,
    acc_ptr,
    sink_ptr,
    o_ptr,
    N,
    G: tl.constexpr,
    DV: tl.constexpr,
    NS: tl.constexpr,
    BS: tl.constexpr,
    BDV: tl.constexpr,
    HAS_SINK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1)
    kh = n // G
    sp = tl.arange(0, BS)
    sm = sp < NS
    dv = tl.arange(0, BDV)
    part = ((b * (N // G) + kh) * NS + sp) * G + n % G  # [BS]
    m = tl.load(m_ptr + part, mask=sm, other=float("-inf"))
    top = tl.max(m, axis=0)
    if HAS_SINK:
        sink = tl.load(sink_ptr + n)
        top = tl.maximum(top, sink)
    top = tl.where(top == float("-inf"), 0.0, top)  # no key, no sink: every weight below is 0
    w = tl.exp(m - top)
    den = tl.sum(tl.load(l_ptr + part, mask=sm, other=0.0) * w, axis=0)
    if HAS_SINK:
        den += tl.exp(sink - top)
    acc = tl.load(
        acc_ptr + part[:, None] * DV + dv[None, :], mask=sm[:, None] & (dv < DV)[None, :], other=0.0
    )
    o = tl.sum(acc * w[:, None], axis=0)
    o = tl.where(den > 0, o / tl.where(den > 0, den, 1.0), 0.0)
    tl.store(o_ptr + (b * N + n) * DV + dv, o, mask=dv < DV)


def pow2(n: int, least: int = 16) -> int:
    """The power of two >= n and >= ``least`` (a block size of ``tl.arange``)."""
    return max(least, triton.next_power_of_2(n))


def check_pools(fn: str, q, k_pool, v_pool, sinks) -> None:
    """The checks the paged attention wrappers (``fn``: this one, ``prefill_attention``) share: q [.., N, D]
    against pools [P, S, K, D] / [P, S, K, Dv] of q's dtype (bf16 or fp32), contiguous; sinks fp32 [N]."""
    N, D = q.shape[-2:]
    K, Dk = k_pool.shape[2:]
    if Dk != D or v_pool.shape[:3] != k_pool.shape[:3] or N % K:
        raise ValueError(
            f"{fn}: q {tuple(q.shape)}, k_pool {tuple(k_pool.shape)}, v_pool {tuple(v_pool.shape)} do not match"
        )
    if not (q.dtype == k_pool.dtype == v_pool.dtype) or q.dtype not in (
        torch.bfloat16,
        torch.float32,
    ):
        raise ValueError(
            f"{fn}: q, k_pool, v_pool must share bf16 or fp32, got {q.dtype}, {k_pool.dtype}, {v_pool.dtype}"
        )
    if sinks is not None and (sinks.dtype != torch.float32 or sinks.shape != (N,)):
        raise ValueError(f"{fn}: sinks must be fp32 [{N}], got {sinks.dtype} {tuple(sinks.shape)}")
    for name, t in (("q", q), ("k_pool", k_pool), ("v_pool", v_pool)):
        if not t.is_contiguous():
            raise ValueError(f"{fn}: {name} must be contiguous")


def splits_for(max_keys: int) -> int:
    """Splits of a context whose page table holds ``max_keys`` keys: one a SPAN_KEYS, at most MAX_SPLITS."""
    return max(1, min(MAX_SPLITS, -(-max_keys // SPAN_KEYS)))


def decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    page_table: torch.Tensor,
    ctx_lens: torch.Tensor,
    scale: float,
    window: int = 0,
    sinks: torch.Tensor | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """q [B, N, D]; k_pool [P, S, K, D], v_pool [P, S, K, Dv] (q's dtype: bf16 or fp32, contiguous); page_table
    [B, Pmax] int64 or int32 (entries past a context: any valid page); ctx_lens [B] int64 (keys of each sequence,
    the new one included; on the device: read there); window > 0: the last ``window`` keys only; sinks [N] fp32
    (a per-head logit in the softmax's denominator). ``splits``: spans a context is cut in (default from
    Pmax * S: ``splits_for``). Returns fp32 [B, N, Dv]."""
    B, N, D = q.shape
    P, S, K, Dk = k_pool.shape
    Dv = v_pool.shape[-1]
    check_pools("decode_attention", q, k_pool, v_pool, sinks)
    if page_table.shape[0] != B or ctx_lens.shape != (B,) or page_table.stride(1) != 1:
        raise ValueError(
            f"decode_attention: page_table {tuple(page_table.shape)} / ctx_lens {tuple(ctx_lens.shape)} for {B} sequences"
        )
    G = N // K
    NS = splits or splits_for(page_table.shape[1] * S)
    m = torch.empty(B, K, NS, G, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    acc = torch.empty(B, K, NS, G, Dv, dtype=torch.float32, device=q.device)
    bd, bdv, bf16 = pow2(D), pow2(Dv), q.dtype == torch.bfloat16
    _span[(B, K, NS)](
        q, k_pool, v_pool, page_table, ctx_lens, m, l, acc, float(scale), int(window),
        page_table.stride(0), S, K,
        G=G, D=D, DV=Dv, NS=NS, BG=pow2(G), BD=bd, BDV=bdv, BN=BN, BF16=bf16, PREC="tf32" if bf16 else "ieee",
    )  # fmt: skip
    o = torch.empty(B, N, Dv, dtype=torch.float32, device=q.device)
    sk = sinks if sinks is not None else m  # any pointer when there is no sink
    _merge[(B, N)](
        m, l, acc, sk, o, N, G=G, DV=Dv, NS=NS, BS=pow2(NS, 2), BDV=bdv, HAS_SINK=sinks is not None
    )
    return o
