"""Torch reference twins of the kernels. Slow and obvious on purpose; tests compare against these.

Legend: T = tokens, H = hidden, I = expert intermediate, R = routes, N = experts in the bank.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from ft_kernels import formats, kquants
from ft_kernels.formats import E2M1, ExpertWeights

_E2M1_SIGNED = torch.cat([E2M1, -E2M1])


def _unpack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """[N, R, C/2] uint8 -> [N, R, C] codes (low nibble first)."""
    return torch.stack([q & 0xF, q >> 4], dim=-1).flatten(-2).long()


def _per_col(s: torch.Tensor, g: int, C: int) -> torch.Tensor:
    return s.repeat_interleave(g, -1)[..., :C]


def _scaled(v: torch.Tensor, s: torch.Tensor, g: int) -> torch.Tensor:
    """v [..., C] float32 times its group's scale s [..., ceil(C / g)]: the products of ``v * _per_col(s, g, C)``,
    broadcast over whole groups where C is a multiple of g (no [..., C] copy of the scales: an embedding lookup's
    one row in a decode step is several torch ops fewer)."""
    C = v.shape[-1]
    if C % g:
        return v * _per_col(s, g, C)
    return (v.view(*v.shape[:-1], C // g, g) * s[..., None]).view(v.shape)


def dequantize(w: ExpertWeights) -> torch.Tensor:
    """ExpertWeights -> float32 [N, rows, cols], exactly the value the kernel multiplies."""
    C, g = w.cols, w.group
    if w.fmt in ("bf16", "f16"):
        return w.q.float()
    if w.fmt == "fp8_e4m3":
        return _scaled(w.q.view(torch.float8_e4m3fn).float(), w.scale.float(), g)
    if w.fmt == "int8_sym":
        return _scaled(w.q.view(torch.int8).float(), w.scale.float(), g)
    if w.fmt in kquants.BLOCK_BYTES:
        return kquants.dequantize(w.q, w.fmt, C)
    if w.fmt in kquants.X16:
        base = w.fmt.removesuffix("_x16")
        return kquants.dequantize(kquants.from_x16(w.q, C, base), base, C)
    if w.fmt in ("mxfp4_x16", "int4_sym_x16", "int8_sym_x16", "fp8_e4m3_x16"):
        unpack = formats.int8_from_x16 if w.fmt in formats.BYTE_X16 else formats.nib_from_x16
        q, scale = unpack(w.q), formats.nib_from_x16(w.scale, scales=True).float()
        return dequantize(dataclasses.replace(w, fmt=w.fmt.removesuffix("_x16"), q=q, scale=scale))
    codes = _unpack_nibbles(w.q)
    if w.fmt == "mxfp4":
        return torch.ldexp(
            _E2M1_SIGNED.to(codes.device)[codes], _per_col(w.scale.to(torch.int32) - 127, 32, C)
        )
    if w.fmt == "nvfp4":
        return (
            _E2M1_SIGNED.to(codes.device)[codes]
            * _per_col(w.scale.view(torch.float8_e4m3fn).float(), 16, C)
            * w.global_scale
        )
    if w.fmt == "int4_sym":
        return (codes.float() - 8.0) * _per_col(w.scale, g, C)
    return (codes.float() - _per_col(w.zero.float(), g, C)) * _per_col(w.scale, g, C)


INT8_FORMATS = (
    "mxfp4",
    "nvfp4",
    "int4_sym",
    "int4_asym",
    "mxfp4_x16",
    "int4_sym_x16",
    *kquants.FORMATS,
)


def int8_applies(w: ExpertWeights) -> bool:
    """Whether ``act_int8`` changes a product with ``w``: a 4-bit or K-quant format, cols % 32 == 0, INT4 groups
    % 32 == 0 (K-quants: whole super-blocks of 256 columns, as their kernels require anyway)."""
    return (
        w.fmt in INT8_FORMATS
        and w.cols % 32 == 0
        and (not w.fmt.startswith("int4") or w.group % 32 == 0)
    )


def quantize_act_int8(x: torch.Tensor) -> torch.Tensor:
    """The kernels' int8 activations, as float32 values: per block of 32 columns, d = max|x| / 127 and
    q = round-half-even(x * (127 / max|x|)) in [-127, 127]; returns q * d (exact in float64)."""
    xf = x.float()
    b = xf.reshape(*xf.shape[:-1], -1, 32)
    amax = b.abs().amax(-1, keepdim=True)
    inv = torch.where(amax > 0, torch.tensor(127.0) / amax, torch.zeros_like(amax))
    q = torch.round(b * inv).clamp(-127, 127)
    return (q.double() * (amax / 127.0).double()).reshape(xf.shape)


def quantize_act_i16(x: torch.Tensor) -> torch.Tensor:
    """The kernels' 16-bit activations (``cpu/q8.h``: Q16Act), as float64 values: per block of 32 columns,
    d = 2^(E - 14) with E = floor(log2 max|x|) clamped to >= -100, q = round-half-even(x / d); a block holding
    an Inf or NaN is NaN. Bf16 values within 2^7 of their block's max come back exactly."""
    xf = x.double()
    b = xf.reshape(*xf.shape[:-1], -1, 32)
    amax = b.abs().amax(-1, keepdim=True)
    e = torch.frexp(amax)[1] - 1  # floor(log2 amax) for amax > 0
    e = torch.where(amax > 0, e, torch.full_like(e, -100)).clamp(min=-100)
    d = torch.pow(2.0, (e - 14).double())
    q = torch.round(b / d) * d
    q = torch.where(torch.isfinite(amax), q, torch.full_like(q, float("nan")))
    return q.reshape(xf.shape)


def linear(
    x: torch.Tensor, w, bias: torch.Tensor | None = None, act_int8: bool = False
) -> torch.Tensor:
    """Reference for ``ft_kernels.linear``: x [T, K] @ dequantised W [N, K] ^T (+ bias) in float32 -> [T, N]
    (``act_int8``: x quantised as ``quantize_act_int8`` first, where ``int8_applies``)."""
    W = w.float() if isinstance(w, torch.Tensor) else dequantize(w)[0]
    if act_int8 and not isinstance(w, torch.Tensor) and int8_applies(w):
        x = quantize_act_int8(x).float()
    y = x.float() @ W.T
    return y if bias is None else y + bias.float()


def expert_act(
    gu: torch.Tensor, act: str, alpha: float = 1.702, limit: float = 7.0
) -> torch.Tensor:
    """[..., 2I] gate-then-up pre-activations -> [..., I]."""
    i = gu.shape[-1] // 2
    g, u = gu[..., :i], gu[..., i:]
    if act == "swiglu":
        return F.silu(g) * u
    g, u = g.clamp(max=limit), u.clamp(-limit, limit)
    return (u + 1) * (g * torch.sigmoid(g * alpha))


def moe_experts(
    x,
    tok,
    eid,
    gate,
    w13: ExpertWeights,
    w2: ExpertWeights,
    act: str = "swiglu",
    alpha: float = 1.702,
    limit: float = 7.0,
    act_int8: bool = False,
) -> torch.Tensor:
    """Reference for ``ft_kernels.moe_experts``: fp32 math, one route at a time. Returns [T, H].
    x in bfloat16 (bf16 activations): the activation h is rounded to bfloat16 (nearest even) before W2.
    ``act_int8`` (both banks ``int8_applies``): x and the activation h quantised as ``quantize_act_int8``."""
    q8 = act_int8 and int8_applies(w13) and int8_applies(w2)
    h_bf16 = x.dtype == torch.bfloat16
    x = quantize_act_int8(x).float() if q8 else x.float()
    y = torch.zeros(x.shape, dtype=torch.float32)
    W13, W2 = dequantize(w13), dequantize(w2)
    for t, e, g in zip(tok.tolist(), eid.tolist(), gate.tolist()):
        gu = W13[e] @ x[t]
        if w13.bias is not None:
            gu = gu + w13.bias[e]
        h = expert_act(gu, act, alpha, limit)
        if h_bf16:
            h = h.bfloat16().float()
        out = W2[e] @ (quantize_act_int8(h).float() if q8 else h)
        if w2.bias is not None:
            out = out + w2.bias[e]
        y[t] += g * out
    return y


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Reference for ``ft_kernels.rms_norm`` (transformers' RMSNorm): float32 math, the normalised row rounded to
    x's dtype, then times w in that dtype; a float32 w with bf16 x (the (1 + w) norms): rounded once."""
    xf = x.float()
    n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if w.dtype == torch.float32 and x.dtype != torch.float32:
        return (n * w).to(x.dtype)
    return w * n.to(x.dtype)


def route_topk(
    logits: torch.Tensor, k: int, kind: str = "softmax", renorm: bool = False, base: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference for ``ft_kernels.route_topk`` in torch ops (the MoE routers' own): softmax -> topk (-> / sum),
    or topk -> softmax; flat tok, eid (int32, + base) and gate (logits' dtype) lists of [T*k]."""
    T = logits.shape[0]
    if kind == "softmax":
        w, ids = torch.softmax(logits, dim=-1).topk(k, dim=-1)
        if renorm:
            w = w / w.sum(-1, keepdim=True)
    else:
        top, ids = logits.topk(k, dim=-1)
        w = torch.softmax(top, dim=-1)
    tok = torch.arange(T, dtype=torch.int32).repeat_interleave(k)
    return tok, (ids + base).to(torch.int32).flatten(), w.flatten()


def decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    page_table: torch.Tensor,
    ctx_lens: torch.Tensor,
    scale: float,
    window: int = 0,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reference for ``ft_kernels.decode_attention`` in float32 (float64 inputs give float64): each sequence's keys
    and values gathered page by page, softmax over the visible keys (and the sink as one more logit), then p.v."""
    B, N, D = q.shape
    S, K = k_pool.shape[1], k_pool.shape[2]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = []
    for b in range(B):
        ctx = int(ctx_lens[b])
        lo = max(0, ctx - window) if window > 0 else 0
        pos = torch.arange(lo, ctx)
        rows = page_table[b, pos // S] * S + pos % S
        k = k_pool.reshape(-1, K, D)[rows].to(dt).repeat_interleave(N // K, dim=1)  # [L, N, D]
        v = v_pool.reshape(-1, K, v_pool.shape[-1])[rows].to(dt).repeat_interleave(N // K, dim=1)
        s = torch.einsum("nd,lnd->nl", q[b].to(dt), k) * scale
        if sinks is not None:
            s = torch.cat([s, sinks.to(dt)[:, None]], dim=1)
        p = torch.softmax(s, dim=-1)[:, : len(pos)]
        out.append(torch.einsum("nl,lnd->nd", p, v))
    return torch.stack(out)


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
) -> torch.Tensor:
    """Reference for ``ft_kernels.prefill_attention`` in float64: each sequence's keys and values gathered page
    by page, the causal (and window) mask, softmax with the sink as one more logit, then p.v. Returns float64
    [T, N, Dv]."""
    T, N, D = q.shape
    S, K = k_pool.shape[1], k_pool.shape[2]
    dt = torch.float64
    out, t0 = [], 0
    for b in range(page_table.shape[0]):
        ql, ctx = int(q_lens[b]), int(ctx_lens[b])
        pos = torch.arange(ctx)
        rows = page_table[b, pos // S] * S + pos % S
        k = k_pool.reshape(-1, K, D)[rows].to(dt).repeat_interleave(N // K, dim=1)  # [L, N, D]
        v = v_pool.reshape(-1, K, v_pool.shape[-1])[rows].to(dt).repeat_interleave(N // K, dim=1)
        qpos = torch.arange(ctx - ql, ctx)
        s = torch.einsum("tnd,lnd->ntl", q[t0 : t0 + ql].to(dt), k) * scale  # [N, ql, L]
        vis = pos[None, :] <= qpos[:, None]
        if window > 0:
            vis &= pos[None, :] > qpos[:, None] - window
        s = s.masked_fill(~vis, float("-inf"))
        if sinks is not None:
            s = torch.cat([s, sinks.to(dt)[:, None, None].expand(N, ql, 1)], dim=-1)
        p = torch.softmax(s, dim=-1)[..., :ctx]
        out.append(torch.einsum("ntl,lnd->tnd", p, v))
        t0 += ql
    return torch.cat(out) if out else torch.empty(0, N, v_pool.shape[-1], dtype=dt)


def rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """Reference for ``ft_kernels.rope`` (ft_core's Rotary.apply in torch): x [T, H, D], cos/sin [T, R/2]."""
    R = 2 * cos.shape[-1]
    rot, rest = x[..., :R].float(), x[..., R:]
    c, s = cos[:, None, :], sin[:, None, :]
    a, b = (
        (rot[..., 0::2], rot[..., 1::2])
        if interleaved
        else (rot[..., : R // 2], rot[..., R // 2 :])
    )
    out = torch.cat([a * c - b * s, b * c + a * s], dim=-1).to(x.dtype)
    return torch.cat([out, rest], dim=-1) if rest.shape[-1] else out


def gdn_decode(
    proj, conv_w, conv_state, state, slots, neg_A, dt_bias, norm_w, eps: float, k_heads: int
) -> torch.Tensor:
    """Reference for ``ft_kernels.gdn_decode`` in torch, with the same rounding points (to proj's dtype): the conv
    sum, its SiLU, beta, the core output, the normalised output, its product with w, and the gated result.
    conv_state and state rows ``slots`` are advanced in place, as the kernel does."""
    dt, (_, Hv, Dk, Dv) = proj.dtype, state.shape
    Hk, B = k_heads, proj.shape[0]
    C = 2 * Hk * Dk + Hv * Dv
    x, z, b, a = proj.split([C, Hv * Dv, Hv, Hv], dim=-1)
    win = torch.cat([conv_state[slots], x[:, :, None]], dim=2)  # [B, C, Kc]
    y = F.silu((win.float() * conv_w.float()).sum(-1).to(dt).float()).to(dt).float()
    q, k, v = y.split([Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    l2 = lambda t, s: t * (s / ((t * t).sum(-1, keepdim=True) + 1e-6).sqrt())  # noqa: E731
    q = l2(q.view(B, Hk, Dk), Dk**-0.5).repeat_interleave(Hv // Hk, dim=1)  # [B, Hv, Dk]
    k = l2(k.view(B, Hk, Dk), 1.0).repeat_interleave(Hv // Hk, dim=1)
    v = v.view(B, Hv, Dv)
    beta = b.float().sigmoid().to(dt).float()
    g = neg_A * F.softplus(a.float() + dt_bias)  # [B, Hv]
    S = state[slots] * g.exp()[..., None, None]  # [B, Hv, Dk, Dv]
    delta = (v - torch.einsum("bhkv,bhk->bhv", S, k)) * beta[..., None]
    S = S + k[..., :, None] * delta[..., None, :]
    o = torch.einsum("bhkv,bhk->bhv", S, q).to(dt).float()
    n = (o * (o * o).mean(-1, keepdim=True).add(eps).rsqrt()).to(dt)
    out = (norm_w * n).float() * F.silu(z.float().view(B, Hv, Dv))
    state[slots] = S
    conv_state[slots] = win[:, :, 1:]
    return out.to(dt).reshape(B, Hv * Dv)


def gdn_prefill(y, g, beta, state, k_heads: int) -> torch.Tensor:
    """Reference for ``ft_kernels.gdn_prefill`` in torch: q, k, v split from y and taken to float32, q and k
    l2-normalised (q scaled by Dk^-1/2), then token by token S <- e^g S, delta = beta (v - S^T k),
    S <- S + k delta^T, o = S^T q. state is advanced in place, as the kernel does. Returns [L, Hv, Dv] float32."""
    (L, _), (Hv, Dk, Dv) = y.shape, state.shape
    Hk = k_heads
    q, k, v = y.float()[:, : 2 * Hk * Dk + Hv * Dv].split([Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    l2 = lambda t, s: t * (s / ((t * t).sum(-1, keepdim=True) + 1e-6).sqrt())  # noqa: E731
    q = l2(q.view(L, Hk, Dk), Dk**-0.5).repeat_interleave(Hv // Hk, dim=1)  # [L, Hv, Dk]
    k = l2(k.view(L, Hk, Dk), 1.0).repeat_interleave(Hv // Hk, dim=1)
    v = v.view(L, Hv, Dv)
    S, out = state.clone(), torch.empty(L, Hv, Dv)
    for t in range(L):
        S = S * g[t].exp()[:, None, None]
        delta = (v[t] - torch.einsum("hkv,hk->hv", S, k[t])) * beta[t][:, None]
        S = S + k[t][:, :, None] * delta[:, None, :]
        out[t] = torch.einsum("hkv,hk->hv", S, q[t])
    state.copy_(S)
    return out


def split_blocks(
    blocks: torch.Tensor, head_bytes: int, nibbles: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference for ``ft_kernels.split_blocks``: the heads and codes sliced apart; where ``nibbles`` the 32 4-bit
    codes put in element order (low nibbles, then high ones) and packed two a byte, element 2k low."""
    head, codes = blocks[..., :head_bytes].clone(), blocks[..., head_bytes:]
    if nibbles:
        e = torch.cat([codes & 0x0F, codes >> 4], dim=-1)  # [..., 32] in element order
        codes = e[..., 0::2] | (e[..., 1::2] << 4)
    return codes.contiguous(), head


def sigmoid_mul(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Reference for ``ft_kernels.sigmoid_mul``: torch's ops in a's dtype."""
    return a * torch.sigmoid(g)


def silu_mul(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Reference for ``ft_kernels.silu_mul``: torch's ops in g's dtype."""
    return F.silu(g) * u
