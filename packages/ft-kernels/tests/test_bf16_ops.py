"""The bf16 element-wise pieces a decode step runs between the kernels -- rms_norm's bf16 path, the rounding of a
projection's fp32 output to bf16, the residual sums -- in their SIMD builds (cpu/arch/x86_avx2_bf16ops.cpp) give
the scalar loops' bits: the same operations in the same order, so equal bit for bit (no bound), NaN and Inf
included. The rounding is also torch's (round to nearest even) bit for bit; the residual sums are checked against
torch's bf16 adds inside the decode layer (test_decode_layer.py).
"""

import os
import subprocess
import sys

import ft_kernels as fk
import pytest
import torch

SHAPES = [(1, 2048), (3, 5), (2, 17), (4, 100), (16, 128)]  # D with tails past 16 and 8 lanes


def _specials(x: torch.Tensor) -> torch.Tensor:
    """x [rows, D] with a NaN row, an Inf row and rows near the top and bottom of the fp32 range (rows 1..4)."""
    x = x.clone()
    for r, v in zip(range(1, 5), (float("nan"), float("inf"), 1e38, 1e-38)):
        if r < x.shape[0]:
            x[r, r % x.shape[1]] = v
    return x


def norm_cases() -> list[torch.Tensor]:
    """rms_norm outputs over SHAPES: bf16 weights, then float32 (1 + w) weights."""
    out = []
    for shape in SHAPES:
        g = torch.Generator().manual_seed(sum(shape))
        x = _specials(torch.randn(*shape, generator=g) * 3).bfloat16()
        w = 1 + torch.randn(shape[-1], generator=g) * 0.3
        out += [fk.rms_norm(x, w.bfloat16(), 1e-6), fk.rms_norm(x, w, 1e-6)]
    return out


def rounding_input(n: int = 300) -> torch.Tensor:
    """fp32 values [2, n]: random ones, halfway ties both ways, the top of the range (rounds to Inf), tiny ones."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(2, n, generator=g) * 10
    ties = (torch.randint(0, 1 << 16, (n,), generator=g) << 16 | 0x8000).int().view(torch.float32)
    x[1] = ties.nan_to_num(0.0, 0.0, 0.0).clamp(-1e30, 1e30)
    x[0, :4] = torch.tensor([3.4e38, -3.4e38, 1e-30, -3e-39])
    return x


def rounded(x: torch.Tensor) -> torch.Tensor:
    """x [T, n] float32 through a projection by the identity (f16, exact: y = x) with a bf16 result, rounded once
    in the kernel."""
    eye = torch.eye(x.shape[1], dtype=torch.float16)
    return fk.linear(x, eye, out_dtype=torch.bfloat16)


def test_projection_rounds_to_bf16_as_torch():
    x = rounding_input()
    got = rounded(x)
    assert torch.equal(got.view(torch.int16), x.bfloat16().view(torch.int16))


@pytest.mark.skipif(fk.active_isa() == "scalar", reason="no SIMD build on this CPU")
def test_simd_builds_equal_the_scalar_loops(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"""
import sys, torch
sys.path.insert(0, {here!r})
import ft_kernels as fk
assert fk.active_isa() == "scalar"
import test_bf16_ops as t
torch.save(t.norm_cases() + [t.rounded(t.rounding_input())], {str(tmp_path / "scalar.pt")!r})
"""
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FT_CPU_ISA": "scalar"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    want = torch.load(tmp_path / "scalar.pt")
    got = norm_cases() + [rounded(rounding_input())]
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), i
    assert (
        got[2][1].isnan().all() and not got[2][0].isnan().any()
    )  # (3, 5): the NaN row's outputs are NaN
