"""Dense projections: ``linear`` routes few-token products with bf16/f16 weights through ft_kernels' CPU
kernel (weights streamed at memory bandwidth on the kernel pool), everything else through ``F.linear``.

Decode reads every dense weight once per step for a handful of tokens; torch's bf16 GEMV there runs
well below bandwidth and its OpenMP threads contend with the kernel pool for the same cores, so
``small_forward`` also runs the step's remaining torch ops on one thread (``torch_threads``).
Legend: T = tokens, K = in features, N = out features.
"""

from __future__ import annotations

import contextlib

import ft_kernels
import torch
import torch.nn.functional as F

KERNEL_MAX_TOKENS = 16  # above this, torch's multi-threaded GEMM (compute-bound prefill) is the better choice
_KERNEL_DTYPES = (torch.bfloat16, torch.float16)


def uses_kernel(x: torch.Tensor, w: torch.Tensor) -> bool:
    """True if ``linear(x, w)`` runs on the CPU kernel: 2-D x of <= KERNEL_MAX_TOKENS rows on the CPU,
    contiguous bf16/f16 weights."""
    return (x.dim() == 2 and x.shape[0] <= KERNEL_MAX_TOKENS and x.device.type == "cpu" and w.dtype in _KERNEL_DTYPES
            and w.is_contiguous() and x.dtype in (torch.float32, torch.bfloat16, torch.float16))


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
           dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [..., K] @ w [N, K]^T (+ b [N]) -> [..., N] in ``dtype`` (default x's). On the kernel path the
    products accumulate in float32 and are rounded once to ``dtype``, as torch's bf16 GEMM does. Twin: F.linear."""
    if not uses_kernel(x, w):
        y = F.linear(x, w, b)
        return y if dtype is None else y.to(dtype)
    xin = x if x.dtype != torch.float16 else x.float()
    y = ft_kernels.linear(xin.contiguous(), w, None if b is None else b.float())
    return y.to(dtype or x.dtype)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run the block with ``n`` torch intra-op threads (None: leave them as they are)."""
    if n is None or n == torch.get_num_threads():
        yield
        return
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def small_forward(tokens: int, dense_dtype: torch.dtype, device: torch.device):
    """The context a forward of ``tokens`` packed tokens runs in: one torch thread when its projections
    go to the kernel pool (the pool owns the cores; torch's leftover ops are tiny), else unchanged."""
    kernel = device.type == "cpu" and dense_dtype in _KERNEL_DTYPES and tokens <= KERNEL_MAX_TOKENS
    return torch_threads(1 if kernel else None)
