"""Decoder layers of a decode step as one C++ call each (``ft_kernels.DecodeLayer``): for the common layer
(GQA over paged KV, routed experts on the CPU kernels, bf16 activations) the ~20 Python-level ops of
``GQAttention`` + ``MoELayer`` cost ~0.25 ms a layer -- 10-30 % of a 4-bit Qwen3-30B-A3B layer's weight
reads. The Qwen3-Next family's layers (gated attention or Gated DeltaNet, (1 + w) norms, a shared expert) get
one too. The plan runs the same kernels in the same order with the same roundings, so a step's result is the
layer-by-layer path's bit for bit (tests/test_decode_plan.py); any other layer keeps that path. Consecutive
planned layers run as one ``ft_kernels.DecodeStack``: one C++ call a step for a model planned throughout.

Legend: T = tokens (one per sequence), H = hidden.
"""

from __future__ import annotations

import ft_kernels
import torch

from ft_core.layers import gated_delta
from ft_core.layers.attn_gated import GatedAttention
from ft_core.layers.attn_gqa import GQAttention
from ft_core.layers.basic import DenseMLP
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.dense import KERNEL_MAX_TOKENS, QuantDense
from ft_core.layers.linear_attn import GatedDeltaNet
from ft_core.layers.moe import MoELayer
from ft_core.experts.backends import CpuKernelBackend
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


def _parts(w) -> tuple[list, bool] | None:
    """A projection kept whole or in parts (a GGUF's stored bits: keep_native) as the plan's list of parts and
    their int8 flag (set on every QuantDense part alike by EngineConfig.int8_activations; a bf16 part, which has
    none, ignores it in the kernel as it does op by op)."""
    parts = [_dense(p) for p in (w if isinstance(w, list) else [w])]
    if any(p is None for p in parts):
        return None
    return [p[0] for p in parts], any(p[1] for p in parts)


def _attn_kwargs(cfg: ModelConfig, attn) -> dict | None:
    """The DecodeLayer arguments of the attention half, or None where the plan does not cover it."""
    if type(attn) is GQAttention and attn.state_index is None:
        if cfg.clip_qkv is not None or cfg.norm_offset:
            return None
        o = _dense(attn.wo)
        split = isinstance(attn.wqkv, list)  # q, k, v in their own formats (keep_native)
        qkv = _parts(attn.wqkv) if split else _dense(attn.wqkv)
        if None in (qkv, o):
            return None
        if cfg.qk_norm is not None and attn.q_norm.dtype != torch.bfloat16:
            return None
        bias = lambda b: None if b is None else b.float()  # noqa: E731  (linear() passes b.float())
        where = (
            dict(parts=qkv[0], parts_int8=qkv[1]) if split else dict(qkv=qkv[0], qkv_int8=qkv[1])
        )
        return dict(
            **where, o=o[0], attn_scale=cfg.attn_scale, qkv_bias=bias(attn.bqkv),
            o_bias=bias(attn.bo), qk_norm=cfg.qk_norm or "none", q_norm=attn.q_norm,
            k_norm=attn.k_norm, rope_interleaved=attn.rotary.cfg.interleaved,
            window=attn.window or 0, sinks=attn.sinks, o_int8=o[1],
        )  # fmt: skip
    if type(attn) is GatedAttention:
        parts, o = _parts(attn.wqkv), _dense(attn.wo)
        if parts is None or o is None or attn.bqkv is not None or attn.bo is not None:
            return None
        return dict(
            attn="gated", parts=parts[0], parts_int8=parts[1], o=o[0], o_int8=o[1],
            attn_scale=cfg.head_dim**-0.5, q_norm=attn.q_norm, k_norm=attn.k_norm,
            rope_interleaved=attn.rotary.cfg.interleaved,
        )  # fmt: skip
    if type(attn) is GatedDeltaNet:
        parts, o, lin = _parts(attn.w_in), _dense(attn.w_out), cfg.linear
        if (
            parts is None
            or o is None
            or attn.recurrent_rule is not gated_delta.recurrent_gated_delta_rule
            or attn.conv_w.dtype != torch.bfloat16
            or attn.norm.dtype != torch.bfloat16
        ):
            return None
        gdn = dict(
            k_heads=lin.k_heads, v_heads=lin.v_heads, k_dim=lin.k_dim, v_dim=lin.v_dim,
            conv_w=attn.conv_w, neg_A=attn.neg_A, dt_bias=attn.dt_bias, norm_w=attn.norm,
            out_order=attn.out_order,
        )  # fmt: skip
        return dict(
            attn="gdn", parts=parts[0], parts_int8=parts[1], o=o[0], o_int8=o[1], attn_scale=1.0,
            gdn=gdn,
        )  # fmt: skip
    return None


def _shared(mlp: MoELayer) -> dict | None | bool:
    """The shared expert as DecodeLayer's ``shared`` (None: the layer has none; False: not plannable)."""
    if mlp.shared is None:
        return None
    e = mlp.shared
    if type(e) is not DenseMLP:
        return False
    gate_up, down = _parts([e.gate, e.up]), _dense(e.down)
    gate = None if mlp.shared_gate is None else _dense(mlp.shared_gate)
    if gate_up is None or down is None or (mlp.shared_gate is not None and gate is None):
        return False
    return dict(
        gate_up=gate_up[0], down=down[0], gate=None if gate is None else gate[0], I=e.down.shape[1],
        int8=(gate_up[1], down[1], gate is not None and gate[1]),
    )  # fmt: skip


def layer_plan(
    cfg: ModelConfig, ln1: torch.Tensor, attn, ln2: torch.Tensor, mlp
) -> ft_kernels.DecodeLayer | None:
    """``ft_kernels.DecodeLayer`` for one decoder layer, or None where the plan does not cover it: MLA, windows
    kept as state, clip_qkv, attention biases on the gated kind, flash-linear-attention's rule, a dense MLP,
    grouped sigmoid routers, an expert backend other than the CPU kernels (the device cache), weights outside
    bf16 / the kernel formats."""
    if not isinstance(mlp, MoELayer):
        return None
    m = mlp.router.m
    if m.router not in ("softmax", "topk_softmax") or type(mlp.backend) is not CpuKernelBackend:
        return None
    kw = mlp.bank.kernel_weights(mlp.base // mlp.bank.num_experts)
    router = _dense(mlp.router.weight.to(torch.bfloat16))
    attn_kw, shared = _attn_kwargs(cfg, attn), _shared(mlp)
    norm_dtype = torch.float32 if cfg.norm_offset else torch.bfloat16
    if (
        kw is None
        or attn_kw is None
        or router is None
        or shared is False
        or ln1.dtype != norm_dtype
        or ln2.dtype != norm_dtype
    ):
        return None
    router_bias = None if mlp.router.bias is None else mlp.router.bias.to(torch.bfloat16).float()
    plan = ft_kernels.DecodeLayer(
        cfg.hidden_size,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
        cfg.rms_eps,
        ln1,
        ln2,
        attn_kw.pop("qkv", None),
        attn_kw.pop("o"),
        router[0],
        kw[0],
        kw[1],
        top_k=m.top_k,
        router_bias=router_bias,
        route=m.router,
        renorm=m.router == "softmax" and m.norm_topk_prob,
        base=mlp.base,
        act=mlp.bank.act,
        alpha=mlp.backend.alpha,
        limit=mlp.backend.limit,
        experts_int8=mlp.backend.int8,
        shared=shared,
        **attn_kw,
    )
    plan.state_index = attn.index if type(attn) is GatedDeltaNet else None
    return plan


def plan_applies(batch: ForwardBatch, x: torch.Tensor) -> bool:
    """Whether a forward of ``x`` [T, H] over ``batch`` may run planned layers: a bf16 CPU decode step (one
    token a sequence) small enough that the layer-by-layer path would also take the kernels (``linear``'s
    KERNEL_MAX_TOKENS, which ``kernel_max_routes`` never goes below: an expert gets at most one route a token)."""
    T = x.shape[0]
    return (
        batch.Lq == 1
        and x.device.type == "cpu"
        and x.dtype == torch.bfloat16
        and T <= KERNEL_MAX_TOKENS
    )


def stack_runs(plans: list) -> dict[int, ft_kernels.DecodeStack]:
    """Each run of consecutive planned layers (``plans[i]`` not None) as one ``ft_kernels.DecodeStack``, keyed by
    its first layer: a step calls C++ once a run instead of once a layer."""
    runs, start = {}, None
    for i, plan in enumerate([*plans, None]):
        if plan is not None and start is None:
            start = i
        elif plan is None and start is not None:
            runs[start] = ft_kernels.DecodeStack(plans[start:i])
            start = None
    return runs


def _pools(stack: ft_kernels.DecodeStack, first: int, batch: ForwardBatch, kv) -> tuple:
    """The stack's layers' pools as ``DecodeStack.bind`` takes them (layer ``first`` onwards)."""
    n = len(stack.layers)
    ks, vs = kv.k[first : first + n], kv.v[first : first + n]
    convs, recs = [None] * n, [None] * n
    for p, plan in enumerate(stack.layers):
        if plan.state_index is not None:  # a Gated DeltaNet layer: its state pools instead of KV
            convs[p], recs[p] = batch.state.live.layer(plan.state_index)
            ks[p] = vs[p] = None
    return ks, vs, convs, recs


def run_stack(
    stack: ft_kernels.DecodeStack,
    first: int,
    x: torch.Tensor,
    batch: ForwardBatch,
    kv,
    cos_sin: tuple[torch.Tensor, torch.Tensor],
    routing_log: list | None,
    top_k: int,
) -> bool:
    """Run layers ``first`` .. ``first + len(stack.layers) - 1`` through their plans, x [T, H] updated in place
    (``routing_log``, if given, receives each layer's flat expert ids [T, k] as ``MoELayer`` records them);
    False (nothing done) when a layer's pools are not bf16 (the layer-by-layer path then runs them)."""
    pools = _pools(stack, first, batch, kv)
    if not stack.bound_to(*pools):
        ks, vs, convs, _ = pools
        if any(t is not None and t.dtype != torch.bfloat16 for t in (*ks, *vs, *convs)):
            return False
        stack.bind(*pools)
    gdn = [p.state_index for p in stack.layers if p.state_index is not None]
    eid = None
    if routing_log is not None:
        eid = torch.empty(len(stack.layers), x.shape[0], top_k, dtype=torch.int32)
    slots = batch.state_slots_tensor() if gdn else None
    stack(x, batch.page_table, batch.ctx_tensor(), batch.slots, *cos_sin, eid, slots)
    if routing_log is not None:
        routing_log.extend(eid.tolist())
    for j in gdn:  # the checkpoints asked for after this token (as GatedDeltaNet takes them)
        batch.state.snapshot_decoded(j)
    return True
