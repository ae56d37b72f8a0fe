"""Torch reference dequantisation of stored weight formats (exact, float32).

- FP8 e4m3 with block scales: ``W[i, j] = q[i, j] * scale_inv[i // B0, j // B1]`` (DeepSeek-V3 /
  Qwen3-FP8 ``weight_scale_inv``); dimensions need not be multiples of the block.
- MXFP4 (OCP microscaling, gpt-oss): ``blocks uint8 [..., rows, cols/32, 16]`` two e2m1 values per
  byte, low nibble first; ``scales uint8 [..., rows, cols/32]`` e8m0, value ``2^(s - 127)``.
"""

from __future__ import annotations

import torch

_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def fp8_block_dequant(q: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """q [..., R, C] float8_e4m3fn, scale_inv [..., ceil(R/B0), ceil(C/B1)] -> float32 [..., R, C]."""
    R, C = q.shape[-2:]
    s = scale_inv.float().repeat_interleave(block[0], dim=-2)[..., :R, :]
    s = s.repeat_interleave(block[1], dim=-1)[..., :C]
    return q.float() * s


def fp8_row_scales(scale_inv: torch.Tensor, rows: int, block0: int) -> torch.Tensor:
    """Block scales [..., ceil(R/B0), nC] -> one scale row per weight row [..., R, nC] (bank layout)."""
    return scale_inv.float().repeat_interleave(block0, dim=-2)[..., :rows, :].contiguous()


def fp8_rows_dequant(q: torch.Tensor, row_scale: torch.Tensor, block1: int) -> torch.Tensor:
    """Bank layout twin: q [..., R, C] fp8, row_scale [..., R, ceil(C/B1)] -> float32 [..., R, C]."""
    C = q.shape[-1]
    return q.float() * row_scale.repeat_interleave(block1, dim=-1)[..., :C]


def mxfp4_dequant(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """blocks uint8 [..., R, G, 16], scales uint8 [..., R, G] -> float32 [..., R, G*32]."""
    lo = (blocks & 0x0F).long()
    hi = (blocks >> 4).long()
    vals = torch.stack([_E2M1[lo], _E2M1[hi]], dim=-1).flatten(-2)  # [..., R, G, 32]
    exp = scales.to(torch.int32) - 127
    out = torch.ldexp(vals, exp[..., None].expand_as(vals))
    return out.flatten(-2)
