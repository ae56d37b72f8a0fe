"""Dense projections in a kernel format (``EngineConfig.dense_format``): after loading, every dense
projection that a decode token reads (attention q/k/v/o, linear-attention in/out, dense and shared-expert
MLPs, the LM head when it is not the embedding) is quantised once with ``ft_kernels.quantize`` and held as a
``QuantDense``; routers (tiny, and their top-k decides the routing) and embeddings stay as loaded.

``keep_native`` / ``native_matrix``: without a dense_format, projections a quantised source stores in a
format the kernels read exactly (a GGUF file's Q4_0 / Q8_0 / Q2_K .. Q6_K) become QuantDense of those
very bits, layer by layer as the model is built: GQA / gated q/k/v (fused) and o, MLA q / q_a / q_b /
kv_a / o, a fused q/k/v whose parts differ in type and the linear attention's in (one QuantDense per part) and out, dense MLPs and MoE shared
experts, the LM head and the token embedding (its looked-up rows dequantised).

llama.cpp's quantised files do the same to every non-expert tensor; with dense weights in bf16 a 4-bit
Qwen3-30B-A3B-shaped model reads more bytes per token for attention than for its routed experts.
"""

from __future__ import annotations

import dataclasses

import torch

import ft_kernels as fk
from ft_kernels import kquants
from ft_kernels.formats import scales_f16
from ft_core.errors import CheckpointError
from ft_core.layers.attn_gated import GatedAttention
from ft_core.layers.attn_gqa import GQAttention
from ft_core.layers.attn_mla import MLAttention
from ft_core.layers.basic import DenseMLP
from ft_core.layers.dense import QuantDense
from ft_core.layers.linear_attn import GatedDeltaNet

ROWS_PER_CHUNK = 2048  # the quantisers' temporaries are ~8x a chunk's fp32 weights: bound them
_ATTRS = ("wqkv", "wo", "wq", "wqa", "wqb", "wkva", "w_in", "w_out", "gate", "up", "down")


def _cols_multiple(fmt: str) -> int:
    """Columns a projection needs a multiple of to take ``fmt`` (others stay as loaded): whole blocks."""
    return kquants.QK if fmt in kquants.BLOCK_BYTES else 32


def kernel_dense(ew, int8: bool) -> QuantDense:
    """A projection's matrix ``ew`` (ExpertWeights [1, N, K]) as the QuantDense the kernels run."""
    return QuantDense(ew, int8)


def _interleaved(d: QuantDense, fmts: tuple[str, ...], pad: bool = False) -> QuantDense:
    """``d`` with a matrix in one of ``fmts`` ("q4_k", "q5_k", "q6_k", "q3_k", "mxfp4", "int4_sym", "int8_sym", "fp8_e4m3") of
    whole 16-row groups repacked 16 rows interleaved (their ``_x16`` layouts: the same values, rows in the
    kernel's lanes); any other ``d`` as it is. ``pad``: rows not in whole 16s too, after zero rows (zero codes
    and scales: their products are 0) up to the next 16, which ``QuantDense.out_rows`` leaves out of the
    result (an LM head: a vocabulary of 50257 rows otherwise kept the row-wise kernels, a third slower a
    byte on a Zen 3 core than the attention's interleaved Q8_0)."""
    ew = d.w
    scaled = ew.fmt in ("mxfp4", "int4_sym", "int8_sym", "fp8_e4m3")  # with scales of their own
    extra = -ew.rows % 16
    if ew.fmt not in fmts or (extra and not pad) or (scaled and (ew.cols % 32 or ew.group % 32)):
        return d

    def rows(t):  # [1, rows, ...] contiguous, with ``extra`` zero rows after them
        t = t.clone(memory_format=torch.contiguous_format)
        return torch.cat([t, t.new_zeros(t.shape[0], extra, *t.shape[2:])], 1) if extra else t

    q = rows(ew.q)
    scale = rows(ew.scale) if scaled else ew.scale
    fk.to_x16_(q, ew.cols, ew.fmt, scale if scaled else None)
    scale = scales_f16(scale)  # fp32 scales in f16 where exact (GGUF's own): fewer bytes a token
    new = dataclasses.replace(ew, fmt=f"{ew.fmt}_x16", q=q, scale=scale)
    return QuantDense(new, d.int8, out_rows=ew.rows if extra else None)


def interleave_dense(model, fmts: tuple[str, ...]) -> int:
    """Repack ``model``'s dense projections in ``fmts`` (QuantDense, and the parts of fused ones) to their
    ``_x16`` layouts in place, for engines whose kernels read those faster (``experts.factory.x16_formats``);
    the LM head too unless it is the embedding (whose looked-up rows read the row-wise blocks). Returns the
    number of matrices repacked."""
    done = 0

    def swap(d, pad=False):
        nonlocal done
        if isinstance(d, list):
            return [swap(p) for p in d]
        if not isinstance(d, QuantDense):
            return d
        new = _interleaved(d, fmts, pad)
        done += new is not d
        return new

    for _, attn, _, mlp in model.layers:
        for obj in (attn, mlp, getattr(mlp, "shared", None)):
            for a in _ATTRS if obj is not None else ():
                if (w := getattr(obj, a, None)) is not None:
                    setattr(obj, a, swap(w))
    if (
        model.lm_head is not model.embed
    ):  # (read in Python, not by the decode plans: padded if need be)
        model.lm_head = swap(model.lm_head, pad=True)
    return done


def quantize_matrix(w: torch.Tensor, fmt: str, int8: bool) -> QuantDense:
    """[N, K] float weights -> QuantDense in ``fmt``, quantised ROWS_PER_CHUNK rows at a time."""
    parts = [
        fk.quantize(w[r : r + ROWS_PER_CHUNK][None].float(), fmt, group=32)
        for r in range(0, w.shape[0], ROWS_PER_CHUNK)
    ]
    cat = lambda f: (
        None if getattr(parts[0], f) is None else torch.cat([getattr(p, f) for p in parts], dim=1)
    )  # noqa: E731
    return kernel_dense(
        dataclasses.replace(parts[0], q=cat("q"), scale=cat("scale"), zero=cat("zero")), int8
    )


def quantize_dense(model, fmt: str, int8: bool) -> int:
    """Replace ``model``'s dense projection weights by QuantDense in place; returns the bytes a decode
    token reads less (old - new weight bytes of the replaced projections)."""
    saved = 0

    def conv(obj) -> None:
        nonlocal saved
        for a in _ATTRS:
            w = getattr(obj, a, None)
            if (
                isinstance(w, torch.Tensor)
                and w.dim() == 2
                and w.is_floating_point()
                and w.shape[1] % _cols_multiple(fmt) == 0
            ):
                q = quantize_matrix(w, fmt, int8)
                saved += w.numel() * w.element_size() - q.nbytes()
                setattr(obj, a, q)

    for _, attn, _, mlp in model.layers:
        conv(attn)
        conv(mlp)
        if getattr(mlp, "shared", None) is not None:
            conv(mlp.shared)
    if model.lm_head is not model.embed and model.lm_head.shape[1] % _cols_multiple(fmt) == 0:
        q = quantize_matrix(model.lm_head, fmt, int8)
        saved += model.lm_head.numel() * model.lm_head.element_size() - q.nbytes()
        model.lm_head = q
    return saved


# the projections (module names) keep_native may swap for their stored bits
SWAPPED = frozenset(
    ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
     "out_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
     "gate_proj", "up_proj", "down_proj")
)  # fmt: skip


def keep_native(layer, r, p: str, int8: bool) -> int:
    """Swap one decoder layer's dense projections (``layer``: (norm, attention, norm, MLP), ``p``: its
    name, "model.layers.3") for the stored bits ``r.native`` gives, as soon as the layer is built: the
    float copies live one layer at a time. Returns the bytes a decode token reads less. A fused q/k/v
    whose tensors differ in type (v in another) becomes one QuantDense per part when it has no bias;
    projections the loader rebuilds from other tensors (MLA's kv_b, the linear attention's) stay as loaded."""
    _, attn, _, mlp = layer
    saved = 0
    a = f"{p}.self_attn"
    if type(attn) in (GQAttention, GatedAttention):
        qkv = [f"{a}.{x}_proj" for x in "qkv"]
        fused = _swap(attn, "wqkv", r, qkv, int8)
        if not fused and attn.bqkv is None:  # v in another type (Q4_K_M: Q6_K in some layers)
            fused = _swap_parts(attn, "wqkv", r, qkv, int8)
        saved += fused + _swap(attn, "wo", r, [f"{a}.o_proj"], int8)
    elif type(attn) is MLAttention:
        for attr, proj in (("wq", "q_proj"), ("wqa", "q_a_proj"), ("wqb", "q_b_proj"),
                           ("wkva", "kv_a_proj_with_mqa"), ("wo", "o_proj")):  # fmt: skip
            saved += _swap(attn, attr, r, [f"{a}.{proj}"], int8)
    elif type(attn) is GatedDeltaNet:
        out = f"{p}.linear_attn.out_proj"
        saved += _swap(attn, "w_out", r, [out], int8) or _swap_ordered(attn, r, out, int8)
        if not attn.cfg.linear.grouped_proj:
            ins = [f"{p}.linear_attn.in_proj_{x}" for x in ("qkv", "z", "b", "a")]
            saved += _swap_parts(attn, "w_in", r, ins, int8)
    mlps = [(mlp, f"{p}.mlp")] if type(mlp) is DenseMLP else []
    for name in ("shared_expert", "shared_experts"):  # MoE layers' shared expert (Qwen / DeepSeek)
        if getattr(mlp, "shared", None) is not None and r.has(f"{p}.mlp.{name}.gate_proj.weight"):
            mlps.append((mlp.shared, f"{p}.mlp.{name}"))
    for obj, m in mlps:
        for w in ("gate", "up", "down"):
            saved += _swap(obj, w, r, [f"{m}.{w}_proj"], int8)
    return saved


def native_matrix(r, prefix: str, rows: int, cols: int, int8: bool) -> QuantDense | None:
    """``prefix``.weight [rows, cols] as a QuantDense of its stored bits when ``r.native`` has them in a kernel
    format (the LM head; the token embedding, whose rows are dequantised as looked up: ``embedding``).
    Refuses (CheckpointError naming file and tensor) a NaN / inf scale: every value of these formats is
    finite exactly when its block's scales are. None: load it as a float weight."""
    ew = r.native([prefix])
    if ew is None or (ew.rows, ew.cols) != (rows, cols):
        return None
    if ew.fmt in kquants.BLOCK_BYTES:
        scales = kquants.super_scales(ew.q, ew.fmt, ew.cols)
    else:  # int4_sym / int8_sym (Q4_0 / Q8_0): q * float32 scale
        scales = ew.scale
    if n := int((~torch.isfinite(scales)).sum()):  # the scales only: small
        raise CheckpointError(
            f"{r.index.file_of(prefix + '.weight')}: tensor '{prefix}.weight' holds {n} NaN/inf "
            f"block scales of {scales.numel()} (corrupt weights)"
        )
    return kernel_dense(ew, int8)


def _swap_ordered(attn, r, prefix: str, int8: bool) -> int:
    """The linear attention's out projection as its stored bits with columns moved (Qwen3.5's value
    heads in tiled order) and the order its input takes (``GatedDeltaNet.out_order``); bytes saved."""
    w, got = attn.w_out, r.native_ordered(prefix)
    if (
        got is None
        or not isinstance(w, torch.Tensor)
        or (got[0].rows, got[0].cols) != tuple(w.shape)
    ):
        return 0
    attn.w_out, attn.out_order = kernel_dense(got[0], int8), got[1]
    return w.numel() * w.element_size() - attn.w_out.nbytes()


def _swap_parts(obj, attr: str, r, prefixes: list[str], int8: bool) -> int:
    """A fused projection ``obj.attr`` (the rows of ``prefixes`` in order) as a list of one QuantDense
    per part when each part's stored bits are in a kernel format (they may differ: Q4_K_M keeps the
    linear attention's in_proj_qkv and attn_v in Q6_K, the rest in Q4_K); the layer runs each part.
    Returns the bytes saved (0: left as loaded)."""
    w = getattr(obj, attr)
    if not isinstance(w, torch.Tensor) or not all(r.has(f"{x}.weight") for x in prefixes):
        return 0
    parts = [r.native([x]) for x in prefixes]
    if any(ew is None for ew in parts) or sum(ew.rows for ew in parts) != w.shape[0]:
        return 0
    setattr(obj, attr, [kernel_dense(ew, int8) for ew in parts])
    return w.numel() * w.element_size() - sum(q.nbytes() for q in getattr(obj, attr))


def _swap(obj, attr: str, r, prefixes: list[str], int8: bool) -> int:
    """Replace ``obj.attr`` [N, K] by a QuantDense of the stored bits of ``prefixes`` (rows in order)
    when ``r.native`` has them in one kernel format; returns the bytes saved (0: left as loaded)."""
    w = getattr(obj, attr, None)
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        return 0
    if not all(r.has(f"{x}.weight") for x in prefixes):
        return 0
    ew = r.native(prefixes)
    if ew is None or (ew.rows, ew.cols) != tuple(w.shape):
        return 0
    q = kernel_dense(ew, int8)
    setattr(obj, attr, q)
    return w.numel() * w.element_size() - q.nbytes()
