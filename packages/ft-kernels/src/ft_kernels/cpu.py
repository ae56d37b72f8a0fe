"""Python face of the C++ CPU kernels: dtype/contiguity handling and output allocation.

Legend: T = tokens, H = hidden, I = expert intermediate, R = routes, N = experts in the bank.
"""

from __future__ import annotations

import torch

from ft_kernels import _C


def active_isa() -> str:
    """The instruction set the CPU kernels run with ("avx512", "avx2" or "scalar"; FT_CPU_ISA forces one)."""
    return _C.active_isa()


def moe_swiglu(
    x: torch.Tensor,  # [T, H] float32
    tok: torch.Tensor,  # [R] int32 token index of each route
    eid: torch.Tensor,  # [R] int32 expert row in the bank
    gate: torch.Tensor,  # [R] float32 gate weight
    w13: torch.Tensor,  # [N, 2I, H] bfloat16, gate rows then up rows
    w2: torch.Tensor,  # [N, H, I] bfloat16
    out: torch.Tensor | None = None,  # [T, H] float32, overwritten
) -> torch.Tensor:
    """Gate-weighted sum of SwiGLU experts over routes, fp32 accumulation. Returns [T, H] float32.

    Twin: ``ft_kernels.reference.moe_swiglu``. Raises ValueError naming a bad argument.
    """
    if out is None:
        out = torch.empty(x.shape[0] if x.dim() == 2 else 0, x.shape[-1], dtype=torch.float32)
    _C.moe_swiglu_bf16(x, tok, eid, gate, w13, w2, out)
    return out
