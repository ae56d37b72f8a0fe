"""Dense projections: ``linear`` routes few-token products with bf16/f16 weights through ft_kernels' CPU
kernel (weights streamed at memory bandwidth on the kernel pool), everything else through ``F.linear``.

Decode reads every dense weight once per step for a handful of tokens; torch's bf16 GEMV there runs
well below bandwidth and its OpenMP threads contend with the kernel pool for the same cores, so
``small_forward`` also runs the step's remaining torch ops on one thread and lets the pool spin.
Legend: T = tokens, K = in features, N = out features.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import ft_kernels
import torch
import torch.nn.functional as F
from ft_kernels import ExpertWeights

KERNEL_MAX_TOKENS = (
    16  # above this, torch's multi-threaded GEMM (compute-bound prefill) is the better choice
)
_KERNEL_DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class QuantDense:
    """A dense projection's weight [N, K] held in a kernel format (``EngineConfig.dense_format``): one
    ExpertWeights matrix; every product with it runs on the CPU kernel. ``int8``: int8 activations
    (``EngineConfig.int8_activations``; 4-bit and K-quant formats take it, others ignore it)."""

    w: ExpertWeights
    int8: bool = False
    # rows of the result where the matrix holds zero rows past them (an LM head of any vocabulary padded
    # to whole 16-row groups for the interleaved kernels: models/dense_quant.py); None: all of them
    out_rows: int | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.out_rows or self.w.rows, self.w.cols)

    def nbytes(self) -> int:
        return self.w.nbytes_per_expert()


def uses_kernel(x: torch.Tensor, w) -> bool:
    """True if ``linear(x, w)`` runs on the CPU kernel: always for a QuantDense; else 2-D x of
    <= KERNEL_MAX_TOKENS rows on the CPU and contiguous bf16/f16 weights."""
    if isinstance(w, QuantDense):
        return True
    return (
        x.dim() == 2
        and x.shape[0] <= KERNEL_MAX_TOKENS
        and x.device.type == "cpu"
        and w.dtype in _KERNEL_DTYPES
        and w.is_contiguous()
        and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
    )


def linear(
    x: torch.Tensor, w, b: torch.Tensor | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """x [..., K] @ w [N, K]^T (+ b [N]) -> [..., N] in ``dtype`` (default x's); w a tensor or a QuantDense.
    On the kernel path the products accumulate in float32 and are rounded once to ``dtype``, as torch's
    bf16 GEMM does. Twins: F.linear; for a QuantDense, ft_kernels.reference.linear."""
    if not uses_kernel(x, w):
        y = F.linear(x, w, b)
        return y if dtype is None else y.to(dtype)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    xin = (x2 if x2.dtype in (torch.float32, torch.bfloat16) else x2.float()).contiguous()
    bias = None if b is None else b.float()
    want = dtype or x.dtype
    out = (
        want if want in (torch.float32, torch.bfloat16) else torch.float32
    )  # rounded in the kernel
    if isinstance(w, QuantDense):
        if w.out_rows is not None and bias is not None:
            bias = F.pad(bias, (0, w.w.rows - w.out_rows))
        y = ft_kernels.linear(xin, w.w, bias, act_int8=w.int8, out_dtype=out)
        if w.out_rows is not None:  # the padding rows' zeros off
            y = y[:, : w.out_rows].contiguous()
    else:
        y = ft_kernels.linear(xin, w, bias, out_dtype=out)
    return y.to(want).reshape(*lead, y.shape[-1])


def embedding(ids: torch.Tensor, w, dtype: torch.dtype) -> torch.Tensor:
    """Rows ``ids`` [T] of the table w [V, H] -> [T, H] in ``dtype``: a tensor's rows, or a QuantDense's (a
    quantised source's embedding kept in its stored bits) dequantised exactly as the kernels read them
    (twin: its whole table dequantised, then the rows)."""
    if not isinstance(w, QuantDense):
        return F.embedding(ids, w).to(dtype)
    e = w.w
    pick = lambda t: None if t is None else t.index_select(1, ids)  # noqa: E731
    rows = ExpertWeights(
        e.fmt, pick(e.q), e.cols, pick(e.scale), pick(e.zero), e.group, e.global_scale
    )
    return ft_kernels.reference.dequantize(rows)[0].to(dtype)


SPIN_US = 300  # pool workers spin this long between the kernel calls of a small forward
_small = threading.local()  # .active: inside a small_forward on this thread


@contextlib.contextmanager
def small_forward(tokens: int, device: torch.device):
    """The context a forward of ``tokens`` packed tokens runs in. A decode-sized forward on the CPU
    (<= KERNEL_MAX_TOKENS) gives the cores to the kernel pool: torch runs its (small) ops on one thread and
    the pool's workers spin between its calls instead of sleeping. Otherwise nothing changes: torch keeps
    its threads for prefill GEMMs and the workers sleep at once, so neither steals the other's cores.
    Nested contexts (a whole engine step around the model's forward and LM head) change nothing more; the
    outermost restores. A whole decode step runs in one: a torch op on all threads in between (sampling)
    leaves OpenMP's workers spinning for a while, and on a 2-core machine they took the pool's cores
    (decode 27 -> 17-19 ms a token, mid model, int4)."""
    if getattr(_small, "active", False) or device.type != "cpu" or tokens > KERNEL_MAX_TOKENS:
        yield
        return
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    ft_kernels.set_spin_us(SPIN_US)
    _small.active = True
    try:
        yield
    finally:
        _small.active = False
        ft_kernels.set_spin_us(0)
        torch.set_num_threads(prev)
