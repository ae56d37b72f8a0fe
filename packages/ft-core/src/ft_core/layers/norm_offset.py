"""Norms of the Qwen3-Next family: RMSNorm scaled by (1 + w), and the gated RMSNorm of Gated DeltaNet
outputs (scaled by w, then multiplied by SiLU of the output gate).

Legend: D = normalised dim.
"""

from __future__ import annotations

import ft_kernels
import torch
import torch.nn.functional as F


def offset_rms_norm(x: torch.Tensor, w1: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D] normalised in float32 and scaled by ``w1`` = 1 + w [D] (float32, precomputed at load);
    result in x's dtype (the product is rounded once, as the reference does). bf16 on the CPU: one C++ pass
    (``ft_kernels.rms_norm`` with a float32 weight; the decode plans call it too)."""
    if x.dtype == torch.bfloat16 and x.device.type == "cpu" and w1.dtype == torch.float32:
        return ft_kernels.rms_norm(x.contiguous(), w1.contiguous(), eps)
    return (F.rms_norm(x.float(), (x.shape[-1],), None, eps) * w1).to(x.dtype)


def gated_rms_norm(
    x: torch.Tensor, gate: torch.Tensor, w: torch.Tensor, eps: float
) -> torch.Tensor:
    """x, gate [..., D] -> w * rmsnorm(x) * silu(gate): the norm in float32, rounded to x's dtype before
    the weight, the gate applied in float32; result in x's dtype. w [D] in x's dtype."""
    xf = x.float()
    y = w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (y * F.silu(gate.float())).to(x.dtype)
