"""Expert FFN over cache slots for the routes a device serves (Triton). Dense slot banks (bf16/f16).

One program per (route, block of rows): phase 1 computes a block of the gate and up rows of
W13[slot] @ x[tok] and the activation into h (rounded to bf16 when x is bf16); phase 2 a block of
W2[slot] @ h, times the gate, atomically added into y[tok] (routes may share a token). fp32 accumulation.
Twin: ``ft_kernels.reference.moe_experts`` with the slot bank as the expert bank.
Legend: T = tokens, H = hidden, I = expert intermediate, R = routes, S = slots.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ft_kernels.formats import ExpertWeights


@triton.jit
def _w13_act(
    x_ptr,
    tok_ptr,
    slot_ptr,
    w_ptr,
    b_ptr,
    h_ptr,
    H,
    I,
    alpha,
    limit,
    HAS_BIAS: tl.constexpr,
    GPTOSS: tl.constexpr,
    H_BF16: tl.constexpr,
    BI: tl.constexpr,
    BH: tl.constexpr,
):
    r = tl.program_id(0)
    i = tl.program_id(1) * BI + tl.arange(0, BI)
    im = i < I
    t = tl.load(tok_ptr + r).to(tl.int64)
    s = tl.load(slot_ptr + r).to(tl.int64)
    im = im & (i * 0 + s >= 0)  # a route on the CPU (slot -1): nothing read, nothing written
    s = tl.maximum(s, 0)
    base = w_ptr + s * (2 * I * H)
    acc_g = tl.zeros([BI], dtype=tl.float32)
    acc_u = tl.zeros([BI], dtype=tl.float32)
    for h0 in range(0, H, BH):
        c = h0 + tl.arange(0, BH)
        cm = c < H
        x = tl.load(x_ptr + t * H + c, mask=cm, other=0.0).to(tl.float32)
        m2 = im[:, None] & cm[None, :]
        wg = tl.load(base + i[:, None] * H + c[None, :], mask=m2, other=0.0).to(tl.float32)
        wu = tl.load(base + (I + i)[:, None] * H + c[None, :], mask=m2, other=0.0).to(tl.float32)
        acc_g += tl.sum(wg * x[None, :], axis=1)
        acc_u += tl.sum(wu * x[None, :], axis=1)
    if HAS_BIAS:
        acc_g += tl.load(b_ptr + s * (2 * I) + i, mask=im, other=0.0)
        acc_u += tl.load(b_ptr + s * (2 * I) + I + i, mask=im, other=0.0)
    if GPTOSS:
        g = tl.minimum(acc_g, limit)
        u = tl.minimum(tl.maximum(acc_u, -limit), limit)
        hv = (u + 1.0) * (g / (1.0 + tl.exp(-alpha * g)))
    else:
        hv = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    if H_BF16:  # bf16 activations: h rounded to bf16 (nearest even, by bits: Triton's interpreter truncates casts)
        u = hv.to(tl.uint32, bitcast=True)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        hv = u.to(tl.float32, bitcast=True)
    tl.store(h_ptr + r * I + i, hv, mask=im)


@triton.jit
def _w2_gate(
    h_ptr,
    tok_ptr,
    slot_ptr,
    gate_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    H,
    I,
    HAS_BIAS: tl.constexpr,
    BO: tl.constexpr,
    BI: tl.constexpr,
):
    r = tl.program_id(0)
    o = tl.program_id(1) * BO + tl.arange(0, BO)
    om = o < H
    t = tl.load(tok_ptr + r).to(tl.int64)
    s = tl.load(slot_ptr + r).to(tl.int64)
    om = om & (o * 0 + s >= 0)  # a route on the CPU (slot -1): nothing read, nothing added
    s = tl.maximum(s, 0)
    base = w_ptr + s * (H * I)
    acc = tl.zeros([BO], dtype=tl.float32)
    for i0 in range(0, I, BI):
        c = i0 + tl.arange(0, BI)
        cm = c < I
        hv = tl.load(h_ptr + r * I + c, mask=cm, other=0.0)
        w = tl.load(
            base + o[:, None] * I + c[None, :], mask=om[:, None] & cm[None, :], other=0.0
        ).to(tl.float32)
        acc += tl.sum(w * hv[None, :], axis=1)
    if HAS_BIAS:
        acc += tl.load(b_ptr + s * H + o, mask=om, other=0.0)
    g = tl.load(gate_ptr + r)
    tl.atomic_add(y_ptr + t * H + o, acc * g, mask=om)


def grouped_experts(
    x: torch.Tensor,
    tok: torch.Tensor,
    slot: torch.Tensor,
    gate: torch.Tensor,
    w13: ExpertWeights,
    w2: ExpertWeights,
    act: str = "swiglu",
    alpha: float = 1.702,
    limit: float = 7.0,
) -> torch.Tensor:
    """y [T, H] float32 = sum over routes of gate * expert_slot(x[tok]); x [T, H], tok/slot [R] int, gate [R].
    Routes whose slot is negative (served on the CPU) are skipped: the caller need not filter them out,
    which would read the slots back to the host."""
    if w13.fmt not in ("bf16", "f16") or w2.fmt != w13.fmt:
        raise ValueError(f"grouped_experts takes bf16/f16 slot banks, got {w13.fmt}/{w2.fmt}")
    if act not in ("swiglu", "gptoss"):
        raise ValueError(f"act must be swiglu or gptoss, got {act!r}")
    T, H = x.shape
    I = w13.rows // 2
    y = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    R = tok.numel()
    if R == 0:
        return y
    h = torch.empty(R, I, dtype=torch.float32, device=x.device)
    xf, tok, slot, gate = (
        x.float().contiguous(),
        tok.contiguous(),
        slot.contiguous(),
        gate.float().contiguous(),
    )
    b13 = w13.bias if w13.bias is not None else h  # dummy pointer when absent
    b2 = w2.bias if w2.bias is not None else h
    BI, BH, BO = 32, 64, 32
    _w13_act[(R, triton.cdiv(I, BI))](
        xf,
        tok,
        slot,
        w13.q,
        b13,
        h,
        H,
        I,
        alpha,
        limit,
        HAS_BIAS=w13.bias is not None,
        GPTOSS=act == "gptoss",
        H_BF16=x.dtype == torch.bfloat16,
        BI=BI,
        BH=BH,
    )
    _w2_gate[(R, triton.cdiv(H, BO))](
        h, tok, slot, gate, w2.q, b2, y, H, I, HAS_BIAS=w2.bias is not None, BO=BO, BI=BI
    )
    return y
