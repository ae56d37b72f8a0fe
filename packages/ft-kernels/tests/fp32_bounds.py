"""Error bounds of the CPU kernels' fp32 arithmetic, derived from the arithmetic (not from one machine).

A float32 sum of n products, in any order and with or without FMA, differs from the exact sum by at
most gamma(n) * sum |w_i x_i| with gamma(n) = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and
Stability of Numerical Algorithms, §3.1). The kernels' results are compared with a float64 evaluation
of the same dequantised weights; the bounds below follow the kernel's stages and are elementwise.
"""

from __future__ import annotations

import itertools

import dataclasses

import ft_kernels as fk
import torch
from ft_kernels import formats as fk_formats
from ft_kernels import kquants
from ft_kernels import reference as R

U = 2.0**-24


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def int8_x16_terms(w) -> torch.Tensor:
    """[N, rows, cols] float64: the magnitudes of the terms INT8_SYM_X16's bf16-activation kernel sums for each
    weight, its two exact parts 128 + l and -128 - 128 h (q = l - 128 h, l its low 7 bits, h its sign bit), times
    |scale|: (256 + l + 128 h) |scale| (at most 512 |scale|, never below |W|)."""
    q = fk_formats.int8_from_x16(w.q).view(torch.int8).long()
    s = fk_formats.nib_from_x16(w.scale, scales=True).double().abs()
    return (256 + (q & 127) + 128 * (q < 0)).double() * s.repeat_interleave(w.group, -1)[
        ..., : w.cols
    ]


def mxfp4_x16_terms(w) -> torch.Tensor:
    """[N, rows, cols] float64: the magnitudes of the terms MXFP4_X16's 16-bit kernels (x86_avx2_mxfp4x16.cpp) sum
    for each weight, 2 e2m1 + 12 (0..24) times x, then 12 times x off, both times 2^(e - 127) / 2: |W| + 6 * 2^(e -
    127). Its bf16 kernels sum |W| alone, so this bounds them too."""
    e = fk_formats.nib_from_x16(w.scale, scales=True).double()
    s = torch.pow(2.0, e - 127).repeat_interleave(32, -1)[..., : w.cols]
    return R.dequantize(w).double().abs() + 6 * s


def kquant_terms(w, q3k_offset: bool = False) -> torch.Tensor:
    """A bound [N, K] (float64) on the magnitudes of the terms a kernel sums for each weight of a K-quant matrix
    when it splits the value: d sc q and dmin m (Q4_K, Q5_K, Q2_K: |W| + 2 |dmin m|), or d sc q and 32 d sc with
    the codes q in 0..63 (Q6_K: |W| + 64 |d sc|). Other matrices, and Q3_K (whose bf16 kernels multiply its signed
    codes, never split): |W|. ``q3k_offset``: Q3_K's int8-activation SIMD kernels and its fp32 AVX2 / AVX-512
    ones split it too, into d (sc - 32) times the codes 0..7 and the code offset 4 d (sc - 32): |W| + 8 |d (sc -
    32)|. Q4_K_X16 and Q5_K_X16 (their bf16-activation kernel multiplies 128 + q, exact in bf16, and takes 128 d
    sc sum(x) off with the min): |W| + 2 |dmin m| + 256 |d sc|. Q6_K_X16 (its kernel takes q - 32 from a table: no split): |W|."""
    if w.fmt == "int8_sym_x16":
        return int8_x16_terms(w)[0]
    if w.fmt == "mxfp4_x16":
        return mxfp4_x16_terms(w)[0]
    W = R.dequantize(w)[0].double().abs()
    if w.fmt == "q6_k_x16":
        return W
    x16 = w.fmt in ("q4_k_x16", "q5_k_x16")
    if x16:  # its Q4_K / Q5_K blocks
        base = w.fmt.removesuffix("_x16")
        w = dataclasses.replace(w, fmt=base, q=kquants.from_x16(w.q, w.cols, base))
    if w.fmt not in kquants.BLOCK_BYTES or (w.fmt == "q3_k" and not q3k_offset):
        return W
    N, K = W.shape
    b = w.q[0][:, : K // kquants.QK * kquants.BLOCK_BYTES[w.fmt]].reshape(N, K // kquants.QK, -1)
    if w.fmt == "q3_k":
        dsc = kquants._f16(b[..., 108:110])[..., None] * (
            kquants._q3k_scales(b[..., 96:108]).float() - 32
        )
        return W + 8 * dsc.double().abs().repeat_interleave(16, -1).reshape(N, K)
    if w.fmt == "q6_k":
        dsc = kquants._f16(b[..., 208:210])[..., None] * b[..., 192:208].view(torch.int8).float()
        return W + 64 * dsc.double().abs().repeat_interleave(16, -1).reshape(N, K)
    if w.fmt == "q2_k":
        dm = kquants._f16(b[..., 82:84])[..., None] * (b[..., :16].long() >> 4).float()
        return W + 2 * dm.double().abs().repeat_interleave(16, -1).reshape(N, K)
    sc, mn = kquants._scale_min(b[..., 4:16])
    dm = kquants._f16(b[..., 2:4])[..., None] * mn.float()
    terms = W + 2 * dm.double().abs().repeat_interleave(32, -1).reshape(N, K)
    if x16:
        dsc = kquants._f16(b[..., 0:2])[..., None] * sc.float()
        terms = terms + 256 * dsc.double().abs().repeat_interleave(32, -1).reshape(N, K)
    return terms


def tiles(w, prefill: bool) -> bool:
    """Whether a prefill-sized call (``linear``: from 16 tokens; ``moe_experts``: an expert with more than 4
    routes) runs ``w`` on the AMX tile kernels (``fk.bf16_tiles``), which take bf16 x as it is."""
    return prefill and hasattr(w, "fmt") and fk.bf16_tiles(w.fmt, w.group)


def kernel_x(x: torch.Tensor, w) -> torch.Tensor:
    """The activations a kernel multiplies ``w`` by: bf16 x meets K-quant and INT4 (groups of 32) weights as 16-bit
    blocks on ISAs without a bf16 dot product (``fk.bf16_i16``: ``R.quantize_act_i16``, float64), unless ``linear``
    runs them on the tile kernels (from 16 tokens); otherwise x."""
    if (
        x.dtype == torch.bfloat16
        and hasattr(w, "fmt")
        and fk.bf16_i16(w.fmt, x.shape[-1], w.group)
        and not tiles(w, x.shape[0] >= 16)
    ):
        return R.quantize_act_i16(x)
    return x


def i16_round(h: torch.Tensor, e_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``R.quantize_act_i16`` applied to an h [..., 32 k] known to within e_h (the kernel quantises its own h):
    (the twin's value of h, bound on |kernel's - twin's|). Where a block's h is exact both are equal; a block
    with any error may get another scale: each value then errs by its e_h plus half of either block's step,
    together at most 2^(floor(log2(max|h| + max e_h)) - 14)."""
    hq = R.quantize_act_i16(h)
    b, eb = h.reshape(*h.shape[:-1], -1, 32), e_h.reshape(*h.shape[:-1], -1, 32)
    top = (b.abs() + eb).amax(-1, keepdim=True).clamp_min(1e-300)
    step = torch.pow(2.0, (torch.frexp(top)[1] - 1 - 14).double())
    extra = torch.where((eb > 0).any(-1, keepdim=True), eb + step, torch.zeros_like(eb))
    return hq, extra.reshape(h.shape)


def linear_bound(
    x, w, bias=None, split_terms=False, q3k_offset=False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact y [T, N] in float64, elementwise bound on |kernel - exact|) for ``ft_kernels.linear``.
    ``split_terms``: the kernel sums a K-quant weight's parts separately (``kquant_terms``). Bf16 x: as the
    kernel sees it (``kernel_x``). INT8_SYM_X16 always counts its kernel's split terms (``int8_x16_terms``)."""
    W = w.double() if isinstance(w, torch.Tensor) else R.dequantize(w)[0].double()
    split_terms = split_terms or getattr(w, "fmt", None) == "int8_sym_x16"
    xd = kernel_x(x, w).double()
    y = xd @ W.T
    mag = xd.abs() @ (kquant_terms(w, q3k_offset) if split_terms else W.abs()).T
    err = gamma(W.shape[1]) * mag + U * y.abs()  # the sum, then rounding to fp32
    if bias is not None:
        y = y + bias.double()
        err = err + U * (y.abs() + err)  # one more rounded addition
    return y, err


def _act(gu: torch.Tensor, act: str, alpha: float, limit: float) -> torch.Tensor:
    return R.expert_act(gu, act, alpha, limit)


def bf16_round(h: torch.Tensor, e_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' bf16 rounding of h (x in bf16), applied to an exact h known to within e_h: (bf16(h) in
    float64, bound on |kernel's bf16(h_kernel) - bf16(h)|). Both round to the same bf16 value unless h lies
    within e_h (plus one fp32 rounding) of a midpoint between two bf16 values; then they may differ by one bf16
    spacing (two near a power of two). So the bound is 0 for nearly every element and a kernel that skips
    or misplaces the rounding misses it by ~2^-9 |h|."""
    hr = h.float().bfloat16().double()
    spacing = torch.ldexp(
        torch.ones_like(h), torch.frexp(h.abs().clamp_min(1e-30))[1] - 8
    )  # bf16 spacing at |h|
    near = spacing / 2 - (h - hr).abs() <= e_h + U * h.abs()
    return hr, torch.where(near, 2 * spacing, torch.zeros_like(h))


def moe_bound(
    x, tok, eid, gate, w13, w2, act="swiglu", alpha=1.702, limit=7.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact y [T, H] in float64, elementwise bound on |kernel - exact|) for ``ft_kernels.moe_experts``.
    Stage by stage: gu = W13 x (+ b13); h = act(gu), its error bounded by the act's change over the corners of
    gu's error box plus 8 ulps for the fp32 exp/division (x in bf16: h then rounded to bf16, ``bf16_round``);
    o = W2 h (+ b2); y = sum of gate * o over routes."""
    h_bf16 = x.dtype == torch.bfloat16
    H, I = x.shape[1], w2.cols
    # 16-bit activations (``kernel_x``) for each bank that takes them: x, and h after its bf16 rounding; in a
    # prefill-sized call a bank on the tile kernels takes its input as it is
    prefill = max(torch.bincount(eid.long()).tolist(), default=0) > 4
    x16 = h_bf16 and fk.bf16_i16(w13.fmt, H, w13.group) and not tiles(w13, prefill)
    h16 = h_bf16 and fk.bf16_i16(w2.fmt, I, w2.group) and not tiles(w2, prefill)
    xd = R.quantize_act_i16(x) if x16 else x.double()
    W13, W2 = R.dequantize(w13).double(), R.dequantize(w2).double()
    # the magnitudes the kernels sum (INT8_SYM_X16, MXFP4_X16: their split terms)
    split = {"int8_sym_x16": int8_x16_terms, "mxfp4_x16": mxfp4_x16_terms}
    M13, M2 = (split[w.fmt](w) if w.fmt in split else M.abs() for w, M in ((w13, W13), (w2, W2)))
    y = torch.zeros(xd.shape, dtype=torch.float64)
    err, mag = torch.zeros_like(y), torch.zeros_like(y)
    routes = [0] * xd.shape[0]
    for t, e, g in zip(tok.tolist(), eid.tolist(), gate.tolist()):
        routes[t] += 1
        gu = W13[e] @ xd[t]
        e_gu = gamma(H) * (M13[e] @ xd[t].abs()) + U * gu.abs()
        if w13.bias is not None:
            gu = gu + w13.bias[e].double()
            e_gu = e_gu + U * (gu.abs() + e_gu)
        h = _act(gu, act, alpha, limit)
        e_h = torch.zeros_like(h)
        for sg, su in itertools.product(
            (-1, 1), repeat=2
        ):  # corners of the error box of (gate, up)
            d = torch.cat([sg * e_gu[:I], su * e_gu[I:]])
            e_h = torch.maximum(e_h, (_act(gu + d, act, alpha, limit) - h).abs())
        e_h = e_h + 8 * U * h.abs()
        if h_bf16:
            h, e_h = bf16_round(h, e_h)
        if h16:
            h, e_h = i16_round(h, e_h)
        o = W2[e] @ h
        e_o = W2[e].abs() @ e_h + gamma(I) * (M2[e] @ (h.abs() + e_h)) + U * o.abs()
        if w2.bias is not None:
            o = o + w2.bias[e].double()
            e_o = e_o + U * (o.abs() + e_o)
        y[t] += g * o
        err[t] += abs(g) * e_o + U * abs(g * o)  # the gate product's rounding
        mag[t] += abs(g) * (o.abs() + e_o)
    return y, err + gamma(max(routes, default=1)) * mag  # the sum over a token's routes


def _context(k_pool, v_pool, page_table, b, lo, hi, N):
    """Keys lo .. hi - 1 of sequence b from the pools in float64: k [L, N, D] (repeated over each KV head's
    query heads), v [L, K, Dv]."""
    S, K, D = k_pool.shape[1], k_pool.shape[2], k_pool.shape[3]
    pos = torch.arange(lo, hi)
    rows = page_table[b, pos // S] * S + pos % S
    k = k_pool.reshape(-1, K, D)[rows].double().repeat_interleave(N // K, dim=1)
    return k, v_pool.reshape(-1, K, v_pool.shape[-1])[rows].double()


def _attention_row_bound(q, k, v, scale, sinks, blocks, e_w=0.0, e_s=0.0) -> torch.Tensor:
    """Bound [N] on |kernel - exact| of one query's heads q [N, D] over keys k [L, N, D], values v [L, ...].

    Each score errs by d = gamma(D + 1) scale max_j sum |q||k_j| (the dot, then the scale) plus u max|s - m|
    (the subtraction before exp), plus e_s. A weight p_j = exp(s_j - m) then errs relatively by e^(2d) - 1 plus
    16 u (exp_neg) plus 17 u per block (each rescale of the running sums by an exp_neg factor, rounded), plus
    e_w; a relative error e in every weight moves the normalised sum by at most 2 e max|v|; the sums over L keys
    add gamma(L + blocks + 2) to the numerator and the denominator, 2 gamma max|v|."""
    D, L = q.shape[-1], k.shape[0]
    s = torch.einsum("nd,lnd->nl", q, k) * scale
    mag = torch.einsum("nd,lnd->nl", q.abs(), k.abs()).max(dim=1).values * scale  # [N]
    top = (
        s.max(dim=1).values if sinks is None else torch.maximum(s.max(dim=1).values, sinks.double())
    )
    spread = (top[:, None] - s).abs().max(dim=1).values
    d = gamma(D + 1) * mag + U * spread + e_s
    e_p = torch.expm1(2 * d) + (16 + 17 * blocks) * U + e_w
    return v.abs().max() * (2 * e_p + 4 * gamma(L + blocks + 2))


def _bf16_dot_terms(L: int, D: int, scale: float) -> tuple[float, float]:
    """(e_w, e_s) of ``_attention_row_bound`` for the bf16 dot-product kernels (prefill, and decode's bf16 span):
    each weight rounded to bf16 (relative 2^-9) and vdpbf16ps's flush below 2^-126 (2^-126 per weight against a
    largest weight of 1, over L keys; 2^-126 per term of a score, D of them)."""
    tiny = 2.0**-126
    return 2.0**-9 + L * tiny, D * tiny * scale


def decode_attention_bound(
    q,
    k_pool,
    v_pool,
    page_table,
    ctx_lens,
    scale,
    window=0,
    sinks=None,
    block=64,
    spans=1,
    bf16_weights=False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact o [B, N, Dv] in float64, bound [B, N] on |kernel - exact| per row) for ``ft_kernels.decode_attention``:
    ``_attention_row_bound`` over the visible keys in blocks of ``block``. A context split in up to ``spans``
    spans adds a partial block and one merge (an exp and a rescale, counted as a block) per span.
    ``bf16_weights``: the bf16 dot-product span (``ft_kernels.decode_attention_bf16``), blocks of 32 with the
    prefill kernel's two more terms (weights rounded to bf16, vdpbf16ps's flush below 2^-126)."""
    exact = R.decode_attention(
        q.double(),
        k_pool.double(),
        v_pool.double(),
        page_table,
        ctx_lens,
        scale,
        window,
        None if sinks is None else sinks.double(),
    )
    B, N, D = q.shape
    bound = torch.zeros(B, N, dtype=torch.float64)
    for b in range(B):
        ctx = int(ctx_lens[b])
        lo = max(0, ctx - window) if window > 0 else 0
        k, v = _context(k_pool, v_pool, page_table, b, lo, ctx, N)
        L = ctx - lo
        if bf16_weights:
            blocks = -(-L // 32) + 2 * spans
            e_w, e_s = _bf16_dot_terms(L, D, scale)
        else:
            blocks, e_w, e_s = -(-L // block) + 2 * spans, 0.0, 0.0
        bound[b] = _attention_row_bound(q[b].double(), k, v, scale, sinks, blocks, e_w=e_w, e_s=e_s)
    return exact, bound


def prefill_attention_bound(
    q, k_pool, v_pool, page_table, q_lens, ctx_lens, scale, window=0, sinks=None, block=32
) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact o [T, N, Dv] in float64, bound [T, N] on |kernel - exact| per row) for
    ``ft_kernels.prefill_attention``: ``_attention_row_bound`` per query row with two more terms: each weight
    is rounded to bf16 before the value sum (relative 2^-9; the denominator sums the rounded weights, so the
    rounding enters as a relative weight error), and vdpbf16ps flushes products and sums below 2^-126 to zero
    (2^-126 per term of a score, D of them; 2^-126 per weight, against a largest weight of 1)."""
    exact = R.prefill_attention(
        q,
        k_pool,
        v_pool,
        page_table,
        q_lens,
        ctx_lens,
        scale,
        window,
        None if sinks is None else sinks.double(),
    )
    T, N, D = q.shape
    bound = torch.zeros(T, N, dtype=torch.float64)
    t0 = 0
    for b in range(page_table.shape[0]):
        ql, ctx = int(q_lens[b]), int(ctx_lens[b])
        k, v = _context(k_pool, v_pool, page_table, b, 0, ctx, N)
        for i in range(ql):
            p = ctx - ql + i
            lo = max(0, p - window + 1) if window > 0 else 0
            L, blocks = p + 1 - lo, -(-(p + 1) // block) + 2
            bound[t0 + i] = _attention_row_bound(
                q[t0 + i].double(),
                k[lo : p + 1],
                v[lo : p + 1],
                scale,
                sinks,
                blocks,
                *_bf16_dot_terms(L, D, scale),
            )
        t0 += ql
    return exact, bound


def gdn_decode_bound(
    proj, conv_w, conv_state, state, slots, neg_A, dt_bias, norm_w, eps, k_heads
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(exact out [B, Hv Dv], bound on |kernel - exact|, exact new states [B, Hv, Dk, Dv], their bound) for
    ``ft_kernels.gdn_decode``, stage by stage in float64, first order, elementwise. Each rounding to the
    activation dtype goes through ``bf16_round`` (bf16) or adds u |h| (fp32). Sums of n products err by
    gamma(n) sum |terms|; exp, sigmoid, softplus and SiLU by 24 u relative (exp_neg's 16 u, a division and a
    product); SiLU's slope is below 1.1; a sum of squares, its sqrt and division err by gamma(D + 1) and 2 u."""
    bf = proj.dtype == torch.bfloat16
    d = lambda t: t.double()  # noqa: E731

    def act(h, e):
        return bf16_round(h, e) if bf else (h, e + U * h.abs())

    def silu(t, e):
        y = torch.nn.functional.silu(t)
        return y, 1.1 * e + 24 * U * y.abs()

    def l2(x, e, scale):  # x * scale / sqrt(sum x^2 + 1e-6) over the last dim
        ss = (x * x).sum(-1, keepdim=True)
        r = scale / (ss + 1e-6).sqrt()
        dss = 2 * (x.abs() * e).sum(-1, keepdim=True) + gamma(x.shape[-1] + 1) * (ss + 1e-6)
        dr = 0.5 * r / (ss + 1e-6) * dss + 2 * U * r
        n = x * r
        return n, r * e + x.abs() * dr + U * n.abs()

    N, Hv, Dk, Dv = state.shape
    Hk, B, rep = k_heads, proj.shape[0], Hv // k_heads
    C = 2 * Hk * Dk + Hv * Dv
    x, z, b, a = d(proj).split([C, Hv * Dv, Hv, Hv], dim=-1)
    win = torch.cat([d(conv_state[slots]), x[:, :, None]], dim=2)
    s = (win * d(conv_w)).sum(-1)
    y, e_y = act(*silu(*act(s, gamma(conv_w.shape[1]) * (win.abs() * d(conv_w).abs()).sum(-1))))
    q, k, v = y.split([Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    eq, ek, ev = e_y.split([Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    q, eq = l2(q.reshape(B, Hk, Dk), eq.reshape(B, Hk, Dk), Dk**-0.5)
    k, ek = l2(k.reshape(B, Hk, Dk), ek.reshape(B, Hk, Dk), 1.0)
    q, eq, k, ek = (t.repeat_interleave(rep, dim=1) for t in (q, eq, k, ek))  # [B, Hv, Dk]
    v, ev = v.reshape(B, Hv, Dv), ev.reshape(B, Hv, Dv)
    beta = torch.sigmoid(b)
    beta, e_beta = act(beta, 24 * U * beta)
    xa = a + d(dt_bias)
    sp = torch.nn.functional.softplus(xa)
    g = d(neg_A) * sp
    e_g = d(neg_A).abs() * (U * xa.abs() + 24 * U * sp) + U * g.abs()
    decay = g.exp()
    e_decay = decay * (e_g + 24 * U)
    S0 = d(state[slots])
    Sd = S0 * decay[..., None, None]
    e_Sd = S0.abs() * e_decay[..., None, None] + U * Sd.abs()
    pred = torch.einsum("bhkv,bhk->bhv", Sd, k)
    e_pred = (
        gamma(Dk) * torch.einsum("bhkv,bhk->bhv", Sd.abs(), k.abs())
        + torch.einsum("bhkv,bhk->bhv", e_Sd, k.abs())
        + torch.einsum("bhkv,bhk->bhv", Sd.abs(), ek)
    )
    dv = v - pred
    delta = dv * beta[..., None]
    e_delta = (ev + e_pred + U * dv.abs()) * beta[..., None] + dv.abs() * e_beta[..., None]
    e_delta = e_delta + U * delta.abs()
    kd = k[..., :, None] * delta[..., None, :]
    S1 = Sd + kd
    e_S1 = (
        e_Sd
        + k.abs()[..., :, None] * e_delta[..., None, :]
        + ek[..., :, None] * delta.abs()[..., None, :]
        + 2 * U * (Sd.abs() + kd.abs())
    )
    o = torch.einsum("bhkv,bhk->bhv", S1, q)
    e_o = (
        gamma(Dk) * torch.einsum("bhkv,bhk->bhv", S1.abs(), q.abs())
        + torch.einsum("bhkv,bhk->bhv", e_S1, q.abs())
        + torch.einsum("bhkv,bhk->bhv", S1.abs(), eq)
    )
    o, e_o = act(o, e_o)
    ms = (o * o).mean(-1, keepdim=True) + eps
    r = ms.rsqrt()
    dms = 2 * (o.abs() * e_o).mean(-1, keepdim=True) + gamma(Dv + 1) * ms
    n = o * r
    n, e_n = act(n, r * e_o + o.abs() * (0.5 * r / ms * dms + 2 * U * r) + U * n.abs())
    w = d(norm_w)
    yw, e_yw = act(w * n, w.abs() * e_n + U * (w * n).abs())
    sz, e_sz = silu(z.reshape(B, Hv, Dv), torch.zeros_like(yw))
    out = yw * sz
    out, e_out = act(out, e_yw * sz.abs() + yw.abs() * e_sz + U * out.abs())
    return out.reshape(B, -1), e_out.reshape(B, -1), S1, e_S1
