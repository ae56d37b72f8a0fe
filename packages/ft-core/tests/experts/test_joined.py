"""experts/joined.py's choices, without a device: which steps get a joined CPU branch (the C++ kernels'
host backend, float32 gates, a step the kernel runs whole), and that a branch which cannot be made
leaves the host join in place with a warning instead of failing the step."""

import logging

import pytest
import torch

from ft_core.experts.backends import CpuKernelBackend, TorchBackend
from ft_core.experts.bank import ExpertBank
from ft_core.experts.captured import StepGraphs
from ft_core.experts.joined import JoinedBranch, branch_for


def _bank(E=4, L=2, H=64, I=32):
    g = torch.Generator().manual_seed(0)
    w13 = torch.randn(E * L, 2 * I, H, generator=g).bfloat16()
    w2 = torch.randn(E * L, H, I, generator=g).bfloat16()
    return ExpertBank("bf16", E, H, I, "swiglu", {"w13": w13, "w2": w2})


def _step(T=2, R=4, H=64, dtype=torch.float32, gate=torch.float32):
    return (
        torch.randn(T, H).to(dtype),
        torch.zeros(R, dtype=torch.long),
        torch.arange(R),
        torch.rand(R).to(gate),
    )


@pytest.mark.parametrize("how", ["callback", "flag"])
def test_a_kernel_backend_step_gets_a_branch(how):
    bank = _bank()
    x, tok, eid, gate = _step()
    b = branch_for(how, "cpu", CpuKernelBackend(), bank, 2, x, eid, gate)
    assert isinstance(b, JoinedBranch) and b.io["x"].shape == (2, 64) and b.io["eid"].shape == (4,)
    b.close()


def test_the_host_joins_where_a_branch_cannot_stand_for_it():
    bank = _bank()
    x, tok, eid, gate = _step()
    assert branch_for("host", "cpu", CpuKernelBackend(), bank, 2, x, eid, gate) is None
    assert branch_for("callback", "cpu", TorchBackend(), bank, 2, x, eid, gate) is None
    x16, _, _, g16 = _step(dtype=torch.float16, gate=torch.bfloat16)
    assert branch_for("callback", "cpu", CpuKernelBackend(), bank, 2, x16, eid, gate) is None
    assert branch_for("callback", "cpu", CpuKernelBackend(), bank, 2, x, eid, g16) is None
    # bf16 x on a bf16 bank: more tokens than the kernel takes an expert's routes for go to torch's GEMM
    xb = torch.randn(40, 64).bfloat16()
    k = CpuKernelBackend(max_routes=16)
    assert branch_for("callback", "cpu", k, bank, 2, xb, eid, gate) is None
    assert branch_for("callback", "cpu", k, bank, 2, xb[:16], eid, gate) is not None


def test_a_branch_that_fails_to_build_leaves_the_host_join(caplog):
    def broken(x, tok, eid, gate):
        raise RuntimeError("no page-locked memory")

    graphs = StepGraphs(cache=None, backend=None, mode=("fill", 1.0), branch_for=broken)
    with caplog.at_level(logging.WARNING, logger="ft_core.engine"):
        assert graphs._branch(*_step()) is None
    assert "the host joins them" in caplog.text and "no page-locked memory" in caplog.text
