"""RMSNorm, the elementwise gates (silu(g) * u, a * sigmoid(g)) and the dense SwiGLU MLP."""

from __future__ import annotations

import ft_kernels
import torch
import torch.nn.functional as F

from ft_core.layers.dense import linear


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D] normalised in float32, scaled by w [D]; result in x's dtype. bf16 on the CPU: one C++ pass
    (``ft_kernels.rms_norm``, twin: the torch lines below) instead of seven torch ops, ~4 norms a layer."""
    if x.dtype == torch.bfloat16 and w.dtype == torch.bfloat16 and x.device.type == "cpu":
        return ft_kernels.rms_norm(x.contiguous(), w.contiguous(), eps)
    if x.dtype == torch.float32 and w.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), w, eps)  # one fused op, the same float32 math
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


def _cpu_bf16(*ts: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype == torch.bfloat16 for t in ts)


def silu_mul(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """silu(g) * u in g's dtype; bf16 on the CPU in one C++ pass (``ft_kernels.silu_mul``, the same two
    roundings; the decode plans call it too)."""
    if _cpu_bf16(g, u) and g.shape == u.shape:
        return ft_kernels.silu_mul(g.contiguous(), u.contiguous())
    return F.silu(g) * u


def sigmoid_mul(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """a [T, C] * sigmoid(g) with g [T, C] or [T, 1], in a's dtype; bf16 on the CPU in one C++ pass
    (``ft_kernels.sigmoid_mul``, as ``silu_mul``)."""
    if _cpu_bf16(a, g) and a.dim() == 2 and g.shape in (a.shape, (a.shape[0], 1)):
        return ft_kernels.sigmoid_mul(a.contiguous(), g.contiguous())
    return a * torch.sigmoid(g)


class DenseMLP:
    """down(silu(gate(x)) * up(x)); weights [I, H], [I, H], [H, I]."""

    def __init__(self, r, prefix: str, hidden: int, inter: int):
        self.gate, _ = r.linear(f"{prefix}.gate_proj", inter, hidden)
        self.up, _ = r.linear(f"{prefix}.up_proj", inter, hidden)
        self.down, _ = r.linear(f"{prefix}.down_proj", hidden, inter)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return linear(silu_mul(linear(x, self.gate), linear(x, self.up)), self.down)
