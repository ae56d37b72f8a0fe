"""The routes of a bf16 bank's experts with prefill-sized work (more than the backend's ``max_routes``; by default
``kernel_max_routes`` of the machine and the expert shape) run through torch's bf16 GEMM (experts/backends.py
``bf16_gemm``), the others through the C++ kernel, in one call; both against the float32 torch backend on the same
bf16 weights.

Bound: the GEMM path rounds three values to bf16 on the way (gate/up outputs, h, the down output), each a relative
2^-9; through the activation and the gate-weighted sum that stays within a few bf16 steps of the output, so
||y - ref|| <= 2^-6 ||ref|| (a wrong expert, gate, bias or activation is off by O(1))."""

import pytest
import torch
from ft_core.experts.backends import (
    CpuKernelBackend,
    TorchBackend,
    bf16_gemm,
    gemm_routes,
    kernel_max_routes,
)
from ft_core.experts.bank import ExpertBank


def _bank(act, E=6, H=96, I=64, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = {
        "w13": (torch.randn(E, 2 * I, H, generator=g) * 0.1).bfloat16(),
        "w2": (torch.randn(E, H, I, generator=g) * 0.1).bfloat16(),
    }
    if bias:
        t["w13_bias"] = torch.randn(E, 2 * I, generator=g) * 0.1
        t["w2_bias"] = torch.randn(E, H, generator=g) * 0.1
    return ExpertBank("bf16", E, H, I, act, t), g


@pytest.mark.parametrize("act, bias", [("swiglu", False), ("gptoss", True)])
def test_prefill_routes_split_between_gemm_and_kernel_and_match(act, bias):
    bank, g = _bank(act, bias=bias)
    n = 16  # this machine's own limit for this shape may be none (kernel_max_routes)
    # experts 0-2: n + 1 .. n + 3 routes (the GEMM); experts 3-5: 1-3 routes (the kernel); tokens in random order
    eid = torch.cat(
        [torch.full((n + 1 + e,), e) for e in range(3)]
        + [torch.full((e - 2,), e) for e in range(3, 6)]
    )
    eid = eid[torch.randperm(eid.numel(), generator=g)]
    T = eid.numel()
    tok = torch.randperm(T, generator=g)  # one route a token: no token meets an expert twice
    x = torch.randn(T, bank.hidden, generator=g).bfloat16()
    gate = torch.rand(T, generator=g)
    big = gemm_routes(eid, n)
    assert big is not None and torch.equal(big, eid < 3)
    ref = TorchBackend().run(bank, x, tok, eid, gate)
    w13, w2 = bank.kernel_weights()
    via_backend = CpuKernelBackend(max_routes=n).run(bank, x, tok, eid, gate)
    only_gemm = bf16_gemm(bank, w13.q, w2.q, x, tok, eid, gate, 1.702, 7.0)
    for y in (via_backend, only_gemm):
        assert y.dtype == torch.float32 and y.shape == ref.shape
        assert (y - ref).norm() <= 2.0**-6 * ref.norm(), ((y - ref).norm() / ref.norm()).item()
    # the small experts' tokens took the kernel (fp32 outputs, not rounded to bf16 as the GEMM's are)
    small = tok[eid >= 3]
    assert not torch.equal(via_backend[small], only_gemm[small])
    assert torch.equal(via_backend[tok[big]], only_gemm[tok[big]])


def test_decode_routes_stay_on_the_kernel():
    for n in (16, 64):
        # a decode step: 4 routes over 4 experts; then as many routes as the kernel takes, then one more
        assert gemm_routes(torch.tensor([0, 3, 5, 1]), n) is None
        assert gemm_routes(torch.zeros(n, dtype=torch.int64), n) is None
        assert bool(gemm_routes(torch.zeros(n + 1, dtype=torch.int64), n).all())
        assert gemm_routes(torch.arange(4 * n) % (2 * n), n) is None  # many routes, 2 an expert
    assert gemm_routes(torch.zeros(1000, dtype=torch.int64), None) is None  # no limit


def test_machine_limit():
    """On AVX-512 BF16 without AMX: none for Qwen3-30B-A3B-sized experts, 64 routes for DeepSeek-V3-sized ones; 16
    elsewhere. Never below a decode step's tokens (decode_plan relies on it)."""
    import ft_kernels
    from ft_core.layers.dense import KERNEL_MAX_TOKENS

    amd_like = ft_kernels.active_isa() == "avx512bf16" and not torch.cpu._is_amx_tile_supported()
    assert kernel_max_routes(2048, 768) == (None if amd_like else 16)
    assert kernel_max_routes(7168, 2048) == (64 if amd_like else 16)
    for shape in ((2048, 768), (7168, 2048), (96, 64), (4096, 1536)):
        n = kernel_max_routes(*shape)
        assert n is None or n >= KERNEL_MAX_TOKENS
    assert CpuKernelBackend().max_routes == "machine"
