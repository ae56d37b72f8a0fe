"""Qwen3.5 / 3.6 MoE (GGUF architecture ``qwen35moe``) and Qwen3-Next (``qwen3next``): what llama.cpp's
converter (``conversion/qwen.py``: Qwen3NextModel, _LinearAttentionVReorderBase) does to the Hugging
Face tensors, undone so that ft's Gated DeltaNet and (1 + w) norms read them as from the hub:

- RMSNorm weights but the gated one of the linear attention are stored as 1 + w  -> w
- ``A_log`` is stored as ``ssm_a`` = -exp(A_log)                                   -> log(-ssm_a)
- ``conv1d.weight`` [C, 1, K] is stored squeezed [C, K]                            -> [C, 1, K]
- Qwen3-Next's grouped ``in_proj_qkvz`` (per key head: q, k, v, z rows) is stored as ``attn_qkv`` (all
  q rows, all k rows, all v rows) and ``attn_gate`` (the z rows)                   -> regrouped
- Qwen3.5: when the linear attention has more value heads than key heads (Hv = r * Hk), every
  value-head axis is stored in "tiled" order [r, Hk, d] instead of Hugging Face's grouped [Hk, r, d]:
  the V rows of ``in_proj_qkv``, the rows of ``in_proj_z`` (d = Dv), ``in_proj_a`` / ``in_proj_b`` /
  A_log / dt_bias (d = 1), the V channels of ``conv1d`` and the columns of ``out_proj`` -> grouped

Legend: Hk / Hv key / value heads, Dk / Dv their dims, r = Hv / Hk.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# The linear-attention tensors: GGUF name (without ".weight" / ".bias") -> HF module name, "{n}" the
# block number (gguf_names adds the names these models share with the others); a key ending in
# ".weight" / ".bias" or listed in BARE maps a whole name
LINEAR = {
    "blk.{n}.attn_qkv": "model.layers.{n}.linear_attn.in_proj_qkv",
    "blk.{n}.attn_gate": "model.layers.{n}.linear_attn.in_proj_z",
    "blk.{n}.ssm_alpha": "model.layers.{n}.linear_attn.in_proj_a",
    "blk.{n}.ssm_beta": "model.layers.{n}.linear_attn.in_proj_b",
    "blk.{n}.ssm_a": "model.layers.{n}.linear_attn.A_log",
    "blk.{n}.ssm_dt.bias": "model.layers.{n}.linear_attn.dt_bias",
    "blk.{n}.ssm_conv1d": "model.layers.{n}.linear_attn.conv1d",
    "blk.{n}.ssm_norm": "model.layers.{n}.linear_attn.norm",
    "blk.{n}.ssm_out": "model.layers.{n}.linear_attn.out_proj",
}
BARE = ("blk.{n}.ssm_a",)  # stored without a suffix, as HF's A_log
# Qwen3-Next: grouped projections (attn_gate is read with attn_qkv)
NEXT_LINEAR = {
    **{k: v for k, v in LINEAR.items() if k not in ("blk.{n}.attn_gate", "blk.{n}.ssm_alpha",
                                                    "blk.{n}.ssm_beta")},
    "blk.{n}.attn_qkv": "model.layers.{n}.linear_attn.in_proj_qkvz",
    "blk.{n}.ssm_ba": "model.layers.{n}.linear_attn.in_proj_ba",
}  # fmt: skip


def config(a: Callable, n: int) -> dict:
    """config.json fields of a ``qwen35moe`` / ``qwen3next`` file beyond the common ones (``a``:
    GGUFFile.arch_get; ``n`` layers)."""
    hv = int(a("ssm.time_step_rank"))
    head_dim = int(a("attention.key_length"))
    recurrent = a("attention.recurrent_layers", None)
    if recurrent is None:  # llama.cpp's default: every full_attention_interval-th layer is full
        every = int(a("full_attention_interval", 4))
        recurrent = [(i + 1) % every != 0 for i in range(n)]
    return {  # the list also covers the MTP blocks after the n layers
        "layer_types": ["linear_attention" if r else "full_attention" for r in recurrent[:n]],
        "num_experts": int(a("expert_count")),
        "moe_intermediate_size": int(a("expert_feed_forward_length")),
        "shared_expert_intermediate_size": int(a("expert_shared_feed_forward_length", 0)),
        "norm_topk_prob": True,  # llama.cpp's graphs of both renormalise the top k
        "linear_conv_kernel_dim": int(a("ssm.conv_kernel")),
        "linear_key_head_dim": int(a("ssm.state_size")),
        "linear_num_key_heads": int(a("ssm.group_count")),
        "linear_num_value_heads": hv,
        "linear_value_head_dim": int(a("ssm.inner_size")) // hv,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": float(a("rope.freq_base", 10000.0)),
            "partial_rotary_factor": int(a("rope.dimension_count", head_dim)) / head_dim,
        },
    }


def _grouped(t: torch.Tensor, dim: int, hk: int, r: int, d: int) -> torch.Tensor:
    """Value heads along ``dim`` from tiled order [r, Hk, d] back to grouped [Hk, r, d]."""
    shape = list(t.shape)
    t = t.reshape(*shape[:dim], r, hk, d, *shape[dim + 1 :])
    return t.transpose(dim, dim + 1).reshape(shape)


def _heads(g) -> tuple[int, int, int, int, int]:
    """(Hk, Hv, Dk, Dv, r) of file ``g``'s linear attention; r = 1 where the value heads stay grouped
    (Qwen3-Next, or Hv = Hk), else Hv / Hk."""
    a = g.arch_get
    hk, hv = int(a("ssm.group_count")), int(a("ssm.time_step_rank"))
    dk, dv = int(a("ssm.state_size")), int(a("ssm.inner_size")) // hv
    return hk, hv, dk, dv, 1 if g.arch == "qwen3next" or not hk else hv // hk


def untransform(g) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """The function (HF name, tensor as stored) -> tensor as Hugging Face stores it, for file ``g``."""
    hk, hv, dk, dv, r = _heads(g)

    def qkvz(name: str, qkv: torch.Tensor) -> torch.Tensor:
        """[q (Hk Dk), k (Hk Dk), v (Hv Dv)] rows and attn_gate's z (Hv Dv) -> per key head q, k, v, z."""
        n = name.split(".")[2]
        z = g.tensor(f"blk.{n}.attn_gate.weight").to_torch(qkv.dtype).to(qkv.dtype)
        H, rv = qkv.shape[-1], hv // hk * dv
        q, k, v = qkv.split([hk * dk, hk * dk, hk * rv])
        parts = [
            q.reshape(hk, dk, H),
            k.reshape(hk, dk, H),
            v.reshape(hk, rv, H),
            z.reshape(hk, rv, H),
        ]
        return torch.cat(parts, 1).reshape(-1, H)

    def fix(name: str, t: torch.Tensor) -> torch.Tensor:
        leaf = name.rsplit(".", 2)
        mod, kind = leaf[-2], leaf[-1]
        if ".linear_attn." not in name:
            if kind == "weight" and mod.endswith("norm"):
                return t - 1  # exact for weights in [0.5, 2] (Sterbenz); ft adds 1 back
            return t
        if mod == "in_proj_qkvz":
            return qkvz(name, t)
        if kind == "A_log":
            t = torch.log(-t.float())
        if kind == "weight" and mod == "conv1d":
            t = t.reshape(t.shape[0], 1, t.shape[-1])
        if r == 1:
            return t
        if mod in ("in_proj_qkv", "conv1d"):  # q and k rows / channels, then the value heads'
            qk = 2 * hk * dk
            return torch.cat([t[:qk], _grouped(t[qk:], 0, hk, r, dv)])
        if mod == "in_proj_z":
            return _grouped(t, 0, hk, r, dv)
        if mod in ("in_proj_a", "in_proj_b") or kind in ("A_log", "dt_bias"):
            return _grouped(t, 0, hk, r, 1)
        if mod == "out_proj":
            return _grouped(t, 1, hk, r, dv)
        return t

    return fix


def stored_rows(g) -> Callable[[str], torch.Tensor | slice | None]:
    """For file ``g``: HF name -> how its stored rows of blocks give the HF matrix's: ``slice(None)`` (as
    stored), a row permutation (HF row i = stored row perm[i]: Qwen3.5's value heads, whole rows of
    blocks) or None (a change inside rows or across tensors: the stored bits are not the matrix)."""
    hk, hv, dk, dv, r = _heads(g)

    def rows(name: str):
        mod = name.rsplit(".", 2)[-2]
        if ".linear_attn." not in name:
            return None if mod.endswith("norm") else slice(None)
        if g.arch == "qwen3next":  # in_proj_qkvz is rebuilt from two tensors; in_proj_ba ungrouped
            return slice(None) if mod == "out_proj" else None
        if r == 1 and mod in ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"):
            return slice(None)
        d = {"in_proj_z": dv, "in_proj_a": 1, "in_proj_b": 1}.get(mod)
        if mod == "in_proj_qkv":
            qk = 2 * hk * dk
            v = _grouped(torch.arange(hv * dv)[:, None], 0, hk, r, dv)[:, 0]
            return torch.cat([torch.arange(qk), qk + v])
        if d is not None:
            return _grouped(torch.arange(hv * d)[:, None], 0, hk, r, d)[:, 0]
        return None  # out_proj's columns, conv1d, A_log, dt_bias, the gated norm

    return rows


def input_order(g) -> Callable[[str], torch.Tensor | None]:
    """For file ``g``: HF name -> ``inv`` when the stored matrix W_s holds the HF one's columns moved
    (Qwen3.5's out_proj, value heads in tiled order): W_hf @ y == W_s @ y[..., inv], so a kernel can
    read the stored bits (blocks run along columns and cannot move) with its input reordered; else
    None."""
    hk, hv, _, dv, r = _heads(g)

    def order(name: str) -> torch.Tensor | None:
        if r == 1 or not name.endswith("linear_attn.out_proj.weight"):
            return None
        q = _grouped(torch.arange(hv * dv)[None], 1, hk, r, dv)[0]  # HF column j: stored q[j]
        return torch.argsort(q)

    return order
