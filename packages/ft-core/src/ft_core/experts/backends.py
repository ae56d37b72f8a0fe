"""Expert implementations: compute a MoE layer's routes on an ExpertBank. Small ABC + registry (DESIGN §8.4).

Vocabulary: an *implementation* (``IMPLS``, chosen by ``EngineConfig.expert_impl`` / ``device_expert_impl``:
torch, kernel, triton) computes routes on one bank; the hierarchy *policy* (``EngineConfig.moe_backend``: cpu,
fill, hybrid, static) decides which bank a route runs on (``experts/factory.py``, ``experts/cached.py``).

A route is (token t, flat expert id, gate weight g); the backend returns
``y[t] = sum over routes of g * expert(x[t])`` as float32 [T, H], whatever format the bank holds.
Legend: T = tokens, H = hidden, I = expert intermediate, R = routes.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F

from ft_core.experts.bank import ExpertBank


class ExpertBackend(ABC):
    name: str
    # reads host tensors only (the CPU kernels on the host bank); a caller whose x is on a device
    # hands it host copies. The hierarchy (experts/cached.py) takes x where it is.
    host_only: bool = True
    # takes routes whose id is negative and skips them (the Triton slot GEMM: a cache step hands it
    # every route, those served on the CPU as slot -1, without reading the slots back to filter them)
    skips_negative: bool = False

    @abstractmethod
    def supports(self, bank: ExpertBank) -> bool: ...

    @abstractmethod
    def run(
        self,
        bank: ExpertBank,
        x: torch.Tensor,
        tok: torch.Tensor,
        eid: torch.Tensor,
        gate: torch.Tensor,
    ) -> torch.Tensor:
        """x [T, H], tok/eid [R] int, gate [R] float32 -> y [T, H] float32. Does not mutate inputs."""


def expert_act(
    bank: ExpertBank, gu: torch.Tensor, alpha: float = 1.702, limit: float = 7.0
) -> torch.Tensor:
    """[n, 2I] gate-then-up pre-activations -> [n, I]."""
    g, u = gu[..., : bank.inter], gu[..., bank.inter :]
    if bank.act == "swiglu":
        return F.silu(g) * u
    g = g.clamp(max=limit)
    u = u.clamp(-limit, limit)
    return (u + 1) * (g * torch.sigmoid(g * alpha))


class TorchBackend(ExpertBackend):
    """Reference: dequantise each used expert to float32 and run it with torch; every format."""

    name = "torch"

    def __init__(self, alpha: float = 1.702, limit: float = 7.0):
        self.alpha, self.limit = alpha, limit

    def supports(self, bank: ExpertBank) -> bool:
        return True

    def run(self, bank, x, tok, eid, gate):
        h_bf16 = x.dtype == torch.bfloat16  # bf16 activations: h rounded to bf16, as the kernels do
        x = x.float()
        y = torch.zeros_like(x)
        ids, inv = torch.unique(eid, return_inverse=True)
        w13_all, w2_all = bank.dequant(ids, "w13"), bank.dequant(ids, "w2")
        b13, b2 = bank.bias("w13"), bank.bias("w2")
        for j, e in enumerate(ids.tolist()):
            sel = (inv == j).nonzero().flatten()
            t = tok[sel]
            gu = x[t] @ w13_all[j].T
            if b13 is not None:
                gu = gu + b13[e]
            h = expert_act(bank, gu, self.alpha, self.limit)
            if h_bf16:
                h = h.bfloat16().float()
            out = h @ w2_all[j].T
            if b2 is not None:
                out = out + b2[e]
            y.index_add_(0, t, out * gate[sel, None])
        return y


class CpuKernelBackend(ExpertBackend):
    """ft_kernels C++ CPU kernels: weights dequantised in the kernel (bf16, f16, fp8 block, mxfp4),
    SwiGLU or the GPT-OSS activation with biases, on a persistent thread pool. A bf16 bank's experts with more
    than ``max_routes`` routes of bf16 x in one call (default: ``kernel_max_routes`` of the machine and the bank's
    expert shape; None: no limit) run on torch's bf16 GEMM instead."""

    name = "kernel"

    def __init__(
        self,
        alpha: float = 1.702,
        limit: float = 7.0,
        int8: bool = False,  # EngineConfig.int8_activations
        max_routes: int | None | str = "machine",
    ):
        self.alpha, self.limit, self.int8 = alpha, limit, int8
        self.max_routes = max_routes

    def supports(self, bank: ExpertBank) -> bool:
        return bank.kernel_weights() is not None

    def run(self, bank, x, tok, eid, gate):
        layer = int(eid[0]) // bank.num_experts if bank.layer_fmts and eid.numel() else 0
        w13, w2 = bank.kernel_weights(layer)  # one MoE layer's routes: its formats
        if x.dtype == torch.bfloat16 and w13.fmt == "bf16" and not self.int8:
            # the GEMM-sized experts' routes on torch's GEMM, the others on the kernel
            mr = self.max_routes
            big = gemm_routes(
                eid, kernel_max_routes(bank.hidden, bank.inter) if mr == "machine" else mr
            )
            if big is not None:
                y = bf16_gemm(
                    bank, w13.q, w2.q, x, tok[big], eid[big], gate[big], self.alpha, self.limit
                )
                if not bool(big.all()):
                    small = ~big
                    y += self._kernel(bank, x, tok[small], eid[small], gate[small], w13, w2)
                return y
        return self._kernel(bank, x, tok, eid, gate, w13, w2)

    def branch_args(self, bank: ExpertBank, tokens: int, dtype: torch.dtype) -> dict | None:
        """The ``ft_kernels.HostBranch`` arguments (weights, activation) that compute a step of ``tokens``
        tokens of x in ``dtype`` as ``run`` does, every route on the kernel; None where ``run`` could take
        another path (torch's GEMM for an expert with many routes, a mixed bank, x neither fp32 nor bf16)."""
        if bank.layer_fmts or dtype not in (torch.float32, torch.bfloat16):
            return None
        w13, w2 = bank.kernel_weights(0)
        if dtype == torch.bfloat16 and w13.fmt == "bf16" and not self.int8:
            mr = self.max_routes
            mr = kernel_max_routes(bank.hidden, bank.inter) if mr == "machine" else mr
            if mr is not None and tokens > mr:  # a route a token an expert at most
                return None
        return dict(
            w13=w13, w2=w2, act=bank.act, alpha=self.alpha, limit=self.limit, act_int8=self.int8
        )

    def _kernel(self, bank, x, tok, eid, gate, w13, w2):
        import ft_kernels

        xin = x if x.dtype in (torch.float32, torch.bfloat16) else x.float()
        return ft_kernels.moe_experts(
            xin.contiguous(),
            tok.to(torch.int32),
            eid.to(torch.int32),
            gate.float().contiguous(),
            w13,
            w2,
            act=bank.act,
            alpha=self.alpha,
            limit=self.limit,
            act_int8=self.int8,
        )


@functools.cache
def kernel_max_routes(hidden: int, inter: int) -> int | None:
    """Routes of one bf16 expert [hidden, inter] (bf16 x) up to which the C++ kernel runs it on this machine;
    torch's bf16 GEMM (oneDNN) takes an expert with more. Never below KERNEL_MAX_TOKENS (a decode step's
    experts stay on the kernel; decode_plan relies on it).

    On AVX-512 BF16 without AMX (AMD Zen 4 / 5): 64 for experts of 4 Mi weights a matrix (hidden x inter) or
    more, else None (no limit): the GEMM's per-expert calls (weights re-laid out, Python around them) pay off only
    on big experts. Two Zen 5 threads, one MoE call on 64 bf16 experts with real routing (512 consecutive tokens
    of an OLMoE trace: 55 routes an expert at the median, 248 at most), ms with no limit / 64: [7168, 2048]
    (DeepSeek-V3) 795-808 / 562-607, [4096, 1536] 274-278 / 242, [2048, 768] (Qwen3-30B-A3B) 71-75 / 80; at 128
    tokens 226 / 213, 90-91 / 93, 25-26 / 29. The Qwen3-30B-A3B-shaped mid model's pp512 (128 experts) ran
    720-810 tok/s with no limit, 540-650 at 64. Elsewhere 16: with AMX the GEMM is several times faster, and
    where the kernel widens x to fp32 (AVX2, AVX-512 without BF16) it ran experts of 32 routes each 2x slower
    than the GEMM."""
    import ft_kernels

    if ft_kernels.active_isa() == "avx512bf16" and not torch.cpu._is_amx_tile_supported():
        return 64 if hidden * inter >= 4 << 20 else None
    return 16


def gemm_routes(eid: torch.Tensor, max_routes: int | None) -> torch.Tensor | None:
    """Which routes ``eid`` [R] go to an expert with more than ``max_routes`` routes (None: no limit), as a bool
    mask [R]; None where no expert has (every decode step)."""
    if max_routes is None or eid.numel() <= max_routes:
        return None
    big = torch.bincount(eid)[eid] > max_routes
    return big if bool(big.any()) else None


def bf16_gemm(
    bank: ExpertBank,
    w13: torch.Tensor,
    w2: torch.Tensor,
    x: torch.Tensor,
    tok: torch.Tensor,
    eid: torch.Tensor,
    gate: torch.Tensor,
    alpha: float,
    limit: float,
) -> torch.Tensor:
    """Prefill-sized routes of a bf16 bank through torch's bf16 GEMM (oneDNN), one expert at a time, as
    transformers' bf16 experts compute: products accumulated in fp32, each projection's output rounded to bf16;
    the activation in fp32 and h rounded to bf16 (as the kernels do). w13 [N, 2I, H], w2 [N, H, I] bf16;
    x [T, H] bf16 -> y [T, H] float32 (gate-weighted sum over routes)."""
    y = torch.zeros(x.shape, dtype=torch.float32)
    order = torch.argsort(eid, stable=True)
    ids, counts = torch.unique_consecutive(eid[order], return_counts=True)
    b13, b2 = bank.bias("w13"), bank.bias("w2")
    start = 0
    for e, n in zip(ids.tolist(), counts.tolist()):
        sel = order[start : start + n]
        start += n
        t = tok[sel]
        gu = F.linear(x[t], w13[e]).float()
        if b13 is not None:
            gu = gu + b13[e]
        h = expert_act(bank, gu, alpha, limit).bfloat16()
        out = F.linear(h, w2[e]).float()
        if b2 is not None:
            out = out + b2[e]
        y.index_add_(0, t, out * gate[sel, None])
    return y


class TritonBackend(ExpertBackend):
    """ft_kernels' Triton grouped expert FFN: the device side of the hierarchy (bf16/f16 slot banks).
    On a CPU it runs only under TRITON_INTERPRET=1 (tests)."""

    name = "triton"
    skips_negative = True

    def __init__(self, alpha: float = 1.702, limit: float = 7.0):
        self.alpha, self.limit = alpha, limit

    def supports(self, bank: ExpertBank) -> bool:
        kw = bank.kernel_weights()
        return kw is not None and kw[0].fmt in ("bf16", "f16")

    def run(self, bank, x, tok, eid, gate):
        from ft_kernels.gpu.grouped_experts import grouped_experts

        w13, w2 = bank.kernel_weights()
        return grouped_experts(
            x, tok, eid, gate, w13, w2, act=bank.act, alpha=self.alpha, limit=self.limit
        )


IMPLS: dict[str, type[ExpertBackend]] = {
    "torch": TorchBackend,
    "kernel": CpuKernelBackend,
    "triton": TritonBackend,
}


def select_impl(
    name: str, bank: ExpertBank, alpha: float, limit: float, int8: bool = False
) -> ExpertBackend:
    """``auto`` takes the C++ kernel where it supports the bank, else the torch reference. ``int8``
    (EngineConfig.int8_activations) needs the kernel."""
    from ft_core.errors import FTError

    if int8 and name not in ("auto", "kernel"):
        raise FTError(
            f"int8_activations runs on the C++ kernels; expert implementation {name!r} has none"
        )
    if name == "auto":
        k = CpuKernelBackend(alpha, limit, int8)
        if int8 and not k.supports(bank):
            raise FTError(
                f"int8_activations needs the C++ kernels, which do not take this {bank.fmt} bank"
            )
        return k if k.supports(bank) else TorchBackend(alpha, limit)
    if name not in IMPLS:
        raise FTError(
            f"expert implementation {name!r} is unknown; choose from auto, {', '.join(IMPLS)}"
        )
    b = CpuKernelBackend(alpha, limit, int8) if name == "kernel" else IMPLS[name](alpha, limit)
    if not b.supports(bank):
        raise FTError(
            f"expert implementation {name!r} does not support {bank.fmt} {bank.act} banks; use auto or torch"
        )
    return b
