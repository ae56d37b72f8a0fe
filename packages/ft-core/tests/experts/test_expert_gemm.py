"""Prefill-sized routes of a bf16 bank run through torch's bf16 GEMM (experts/backends.py ``bf16_gemm``), decode-
sized ones through the C++ kernel; both against the float32 torch backend on the same bf16 weights.

Bound: the GEMM path rounds three values to bf16 on the way (gate/up outputs, h, the down output), each a relative
2^-9; through the activation and the gate-weighted sum that stays within a few bf16 steps of the output, so
||y - ref|| <= 2^-6 ||ref|| (a wrong expert, gate, bias or activation is off by O(1))."""

import pytest
import torch
from ft_core.experts.backends import CpuKernelBackend, TorchBackend, bf16_gemm, gemm_sized
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
def test_prefill_routes_take_the_gemm_and_match(act, bias):
    bank, g = _bank(act, bias=bias)
    T, k = 200, 2
    x = torch.randn(T, bank.hidden, generator=g).bfloat16()
    tok = torch.arange(T).repeat_interleave(k)
    eid = torch.randint(0, bank.num_experts, (T * k,), generator=g)
    gate = torch.rand(T * k, generator=g)
    assert gemm_sized(eid)
    ref = TorchBackend().run(bank, x, tok, eid, gate)
    w13, w2 = bank.kernel_weights()
    via_backend = CpuKernelBackend().run(bank, x, tok, eid, gate)
    for y in (via_backend, bf16_gemm(bank, w13.q, w2.q, x, tok, eid, gate, 1.702, 7.0)):
        assert y.dtype == torch.float32 and y.shape == ref.shape
        assert (y - ref).norm() <= 2.0**-6 * ref.norm(), ((y - ref).norm() / ref.norm()).item()


def test_decode_routes_stay_on_the_kernel():
    bank, g = _bank("swiglu")
    eid = torch.tensor([0, 3, 5, 1])
    assert not gemm_sized(eid)  # a decode step: 4 routes over 4 experts
    assert not gemm_sized(torch.zeros(100, dtype=torch.int64))  # few routes in all
