"""Decoder layers of a decode step as one C++ call each (``ft_kernels.DecodeLayer``): for the common layer
(GQA over paged KV, routed experts on the CPU kernels, bf16 activations) the ~20 Python-level ops of
``GQAttention`` + ``MoELayer`` cost ~0.25 ms a layer -- 10-30 % of a 4-bit Qwen3-30B-A3B layer's weight
reads. The plan runs the same kernels in the same order with the same roundings, so a step's result is the
layer-by-layer path's bit for bit (tests/test_decode_plan.py); any other layer keeps that path.

Legend: T = tokens (one per sequence), H = hidden.
"""

from __future__ import annotations

import ft_kernels
import torch

from ft_core.layers.attn_gqa import GQAttention
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.dense import KERNEL_MAX_TOKENS, QuantDense
from ft_core.layers.moe import MoELayer
from ft_core.experts.backends import GEMM_MIN_ROUTES, CpuKernelBackend
from ft_core.model_config import ModelConfig


def _dense(w) -> tuple[object, bool] | None:
    """A projection weight as the plan takes it (ExpertWeights or a bf16 tensor) and its int8 flag; None when
    ``layers.dense.linear`` would not run it on the kernel (a float32 weight goes to torch)."""
    if isinstance(w, QuantDense):
        return w.w, w.int8
    if (
        isinstance(w, torch.Tensor)
        and w.dtype == torch.bfloat16
        and w.dim() == 2
        and w.is_contiguous()
    ):
        return w, False
    return None


def layer_plan(
    cfg: ModelConfig, ln1: torch.Tensor, attn, ln2: torch.Tensor, mlp
) -> ft_kernels.DecodeLayer | None:
    """``ft_kernels.DecodeLayer`` for one decoder layer, or None where the plan does not cover it: attention that
    is not GQA over paged KV (MLA, gated, linear, windows kept as state), clip_qkv, (1 + w) norms, a dense MLP,
    shared experts, grouped sigmoid routers, an expert backend other than the CPU kernels (the device cache),
    weights outside bf16 / the kernel formats."""
    if (
        type(attn) is not GQAttention
        or attn.state_index is not None
        or not isinstance(mlp, MoELayer)
    ):
        return None
    if cfg.clip_qkv is not None or cfg.norm_offset or mlp.shared is not None:
        return None
    m = mlp.router.m
    if m.router not in ("softmax", "topk_softmax") or type(mlp.backend) is not CpuKernelBackend:
        return None
    kw = mlp.bank.kernel_weights(mlp.base // mlp.bank.num_experts)
    qkv, o, router = (
        _dense(attn.wqkv),
        _dense(attn.wo),
        _dense(mlp.router.weight.to(torch.bfloat16)),
    )
    if (
        kw is None
        or None in (qkv, o, router)
        or ln1.dtype != torch.bfloat16
        or ln2.dtype != torch.bfloat16
    ):
        return None
    if cfg.qk_norm is not None and attn.q_norm.dtype != torch.bfloat16:
        return None
    bias = lambda b: None if b is None else b.float()  # noqa: E731  (linear() passes b.float())
    router_bias = None if mlp.router.bias is None else mlp.router.bias.to(torch.bfloat16).float()
    return ft_kernels.DecodeLayer(
        cfg.hidden_size,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
        cfg.rms_eps,
        ln1,
        ln2,
        qkv[0],
        o[0],
        router[0],
        kw[0],
        kw[1],
        top_k=m.top_k,
        attn_scale=cfg.attn_scale,
        qkv_bias=bias(attn.bqkv),
        o_bias=bias(attn.bo),
        router_bias=router_bias,
        qk_norm=cfg.qk_norm or "none",
        q_norm=attn.q_norm,
        k_norm=attn.k_norm,
        rope_interleaved=attn.rotary.cfg.interleaved,
        window=attn.window or 0,
        sinks=attn.sinks,
        route=m.router,
        renorm=m.router == "softmax" and m.norm_topk_prob,
        base=mlp.base,
        act=mlp.bank.act,
        alpha=mlp.backend.alpha,
        limit=mlp.backend.limit,
        qkv_int8=qkv[1],
        o_int8=o[1],
        experts_int8=mlp.backend.int8,
    )


def plan_applies(batch: ForwardBatch, x: torch.Tensor, top_k: int) -> bool:
    """Whether a forward of ``x`` [T, H] over ``batch`` may run planned layers: a bf16 CPU decode step (one
    token a sequence) small enough that the layer-by-layer path would also take the kernels (``linear``'s
    KERNEL_MAX_TOKENS, the experts below ``gemm_sized``)."""
    T = x.shape[0]
    return (
        batch.Lq == 1
        and x.device.type == "cpu"
        and x.dtype == torch.bfloat16
        and T <= KERNEL_MAX_TOKENS
        and T * top_k < 16 * GEMM_MIN_ROUTES
    )


def run_planned(
    plan: ft_kernels.DecodeLayer,
    x: torch.Tensor,
    batch: ForwardBatch,
    kv,
    layer: int,
    cos_sin: tuple[torch.Tensor, torch.Tensor],
    routing_log: list | None,
    top_k: int,
) -> bool:
    """Run layer ``layer`` through its plan, x [T, H] updated in place (``routing_log``, if given, receives its
    flat expert ids [T, k] as ``MoELayer`` records them); False (nothing done) when this layer's KV pools are
    not bf16 (the layer-by-layer path then runs it)."""
    kp, vp = kv.k[layer], kv.v[layer]
    if kp.dtype != torch.bfloat16 or vp is None or vp.dtype != torch.bfloat16:
        return False
    ctx = batch.memo.get("ctx")
    if ctx is None:
        ctx = batch.memo["ctx"] = torch.tensor(batch.ctx_lens, dtype=torch.int64)
    eid = None if routing_log is None else torch.empty(x.shape[0], top_k, dtype=torch.int32)
    plan(x, kp, vp, batch.page_table, ctx, batch.slots, cos_sin[0], cos_sin[1], eid)
    if routing_log is not None:
        routing_log.append(eid.tolist())
    return True
