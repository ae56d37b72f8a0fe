"""Rotary position embeddings: default and yarn frequency schedules; NeoX-halves
or DeepSeek-interleaved pairs; partial rotary (only the first ``dim`` dims of a head rotate).

Legend: T = tokens, N = heads, D = head dim, R = rotary dims.
"""

from __future__ import annotations

import math

import ft_kernels
import torch

from ft_core.model_config import RopeConfig, yarn_mscale


def inv_freq_and_scale(r: RopeConfig) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [R/2] (float32) and the factor applied to cos/sin."""
    dim, base = r.dim, r.theta
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if r.kind != "yarn":
        return inv, 1.0
    factor = r.factor
    if r.attention_factor is not None:
        att = float(r.attention_factor)
    elif r.mscale and r.mscale_all_dim:
        att = yarn_mscale(factor, r.mscale) / yarn_mscale(factor, r.mscale_all_dim)
    else:
        att = yarn_mscale(factor)

    def corr_dim(rot: float) -> float:
        return (dim * math.log(r.original_max_position / (rot * 2 * math.pi))) / (
            2 * math.log(base)
        )

    lo, hi = corr_dim(r.beta_fast), corr_dim(r.beta_slow)
    if r.truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # share of the extrapolated (unscaled) frequency
    return inter * (1 - keep) + extra * keep, att


class Rotary:
    """cos/sin for positions; ``apply`` rotates the first R dims of q or k in place of a copy."""

    def __init__(self, r: RopeConfig):
        self.cfg = r
        self.inv_freq, self.scale = inv_freq_and_scale(r)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] int64 -> cos, sin [T, R/2] float32 (already multiplied by the yarn factor)."""
        f = positions.float()[:, None] * self.inv_freq[None, :]
        return f.cos() * self.scale, f.sin() * self.scale

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, N, D] -> same shape; cos/sin [T, R/2]. Math in float32, result in x's dtype. On the CPU one
        C++ pass (``ft_kernels.rope``, twin: the torch lines below, the same roundings)."""
        if (
            x.device.type == "cpu"
            and x.dtype in (torch.float32, torch.bfloat16)
            and cos.dtype == torch.float32
        ):
            return ft_kernels.rope(
                x.contiguous(), cos.contiguous(), sin.contiguous(), self.cfg.interleaved
            )
        R = self.cfg.dim
        rot, rest = x[..., :R].float(), x[..., R:]
        c, s = cos[:, None, :], sin[:, None, :]
        if self.cfg.interleaved:
            a, b = rot[..., 0::2], rot[..., 1::2]
        else:
            a, b = rot[..., : R // 2], rot[..., R // 2 :]
        out = torch.cat([a * c - b * s, b * c + a * s], dim=-1).to(x.dtype)
        return torch.cat([out, rest], dim=-1) if rest.shape[-1] else out
