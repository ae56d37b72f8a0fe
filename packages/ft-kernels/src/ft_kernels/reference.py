"""Torch reference twins of the kernels. Slow and obvious on purpose; tests compare against these.

Legend: T = tokens, H = hidden, I = expert intermediate, R = routes, N = experts in the bank.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def moe_swiglu(x, tok, eid, gate, w13, w2) -> torch.Tensor:
    """Reference for ``ft_kernels.moe_swiglu``: fp32 math, one route at a time. Returns [T, H]."""
    x = x.float()
    y = torch.zeros(x.shape, dtype=torch.float32)
    inter = w13.shape[1] // 2
    for t, e, g in zip(tok.tolist(), eid.tolist(), gate.tolist()):
        gu = w13[e].float() @ x[t]
        h = F.silu(gu[:inter]) * gu[inter:]
        y[t] += g * (w2[e].float() @ h)
    return y
