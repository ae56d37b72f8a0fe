"""FP8 e4m3 block scales of checkpoints: ``W[i, j] = q[i, j] * scale_inv[i // B0, j // B1]``
(DeepSeek-V3 / Qwen3-FP8 ``weight_scale_inv``); dimensions need not be multiples of the block.
Dense weights are dequantised at load; expert banks keep one scale row per weight row (the layout
the CPU kernels read; ``ft_kernels.reference.dequantize`` is their dequantisation twin).
"""

from __future__ import annotations

import torch

# Stored dtypes a weight may have: floating point, and the fp8 kinds (block-scaled).
FLOAT = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def fp8_block_dequant(
    q: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]
) -> torch.Tensor:
    """q [..., R, C] float8_e4m3fn, scale_inv [..., ceil(R/B0), ceil(C/B1)] -> float32 [..., R, C]."""
    R, C = q.shape[-2:]
    s = scale_inv.float().repeat_interleave(block[0], dim=-2)[..., :R, :]
    s = s.repeat_interleave(block[1], dim=-1)[..., :C]
    return q.float() * s


def fp8_row_scales(scale_inv: torch.Tensor, rows: int, block0: int) -> torch.Tensor:
    """Block scales [..., ceil(R/B0), nC] -> one scale row per weight row [..., R, nC] (bank layout)."""
    return scale_inv.float().repeat_interleave(block0, dim=-2)[..., :rows, :].contiguous()
