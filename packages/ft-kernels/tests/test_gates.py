"""ft_kernels.sigmoid_mul / silu_mul against their twins (torch's ops in the activation dtype), and rms_norm's
float32-weight form (the (1 + w) norms) against its twin.

Bound, from the arithmetic: the gate's fp32 value differs from torch's by the exp and division roundings (20 u
relative, u = 2^-24; sigmoid.h). In float32 the product adds one rounding each side: |diff| <= 24 u |y|. In
bfloat16 the gate and the product are each rounded to bf16; where the fp32 gate lies within 20 u of a bf16
midpoint the two roundings may differ by one bf16 step (2^-8 relative), which the product carries: |diff| <=
2 * 2^-8 |y| + one bf16 step of the product; nearly every element is equal.
"""

import ft_kernels as fk
import pytest
import torch
from ft_kernels import reference as R

U = 2.0**-24


def _check(got, want, dtype):
    assert got.dtype == dtype and got.shape == want.shape
    diff = (got.double() - want.double()).abs()
    if dtype == torch.float32:
        assert (diff <= 24 * U * want.double().abs() + 1e-37).all()
    else:
        assert (diff <= 3 * 2.0**-8 * want.double().abs() + 1e-37).all()
        assert (diff > 0).double().mean() < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "T,C,per_row", [(1, 4096, False), (3, 100, False), (2, 2048, True), (4, 7, True)]
)
def test_sigmoid_mul(T, C, per_row, dtype):
    g = torch.Generator().manual_seed(T * C)
    a = (torch.randn(T, C, generator=g) * 3).to(dtype)
    gate = (torch.randn(T, 1 if per_row else C, generator=g) * 6).to(dtype)
    gate[0, 0] = 100.0  # saturated ends: sigmoid 1 and e^-100
    if not per_row:
        gate[0, 1] = -100.0
    _check(fk.sigmoid_mul(a, gate), R.sigmoid_mul(a, gate), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 512), (3, 768), (5,), (2, 3, 33)])
def test_silu_mul(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    gate = (torch.randn(*shape, generator=g) * 4).to(dtype)
    up = torch.randn(*shape, generator=g).to(dtype)
    gate.view(-1)[0] = -90.0
    _check(fk.silu_mul(gate, up), R.silu_mul(gate, up), dtype)


@pytest.mark.parametrize("shape", [(1, 2048), (16, 256), (3, 5, 128)])
def test_rms_norm_float32_weight_rounds_once(shape):
    """bf16 x with a float32 (1 + w): one rounding of (x r) w. Kernel and twin sum the squares in other orders
    ((D + 4) u relative on r, rms_norm's test), then round once to bf16: one bf16 step apart at most, rarely."""
    g = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(*shape, generator=g) * 2).bfloat16()
    w1 = 1 + torch.randn(shape[-1], generator=g) * 0.3
    got, want = fk.rms_norm(x, w1, 1e-6), R.rms_norm(x, w1, 1e-6)
    diff = (got.double() - want.double()).abs()
    assert got.dtype == torch.bfloat16 and (diff <= 2.0**-7 * want.double().abs()).all()
    assert (diff > 0).double().mean() < 0.01
    double_rounded = (w1.bfloat16() * R.rms_norm(x, torch.ones_like(w1).bfloat16(), 1e-6)).double()
    assert (got.double() != double_rounded).any()  # the one-rounding form is what it computes


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: fk.sigmoid_mul(torch.ones(2, 4), torch.ones(2, 3)), "g must be"),
        (lambda: fk.sigmoid_mul(torch.ones(2, 4), torch.ones(2, 4).bfloat16()), "g must be"),
        (lambda: fk.silu_mul(torch.ones(4), torch.ones(5)), "one dtype and size"),
        (
            lambda: fk.silu_mul(
                torch.ones(4, dtype=torch.float16), torch.ones(4, dtype=torch.float16)
            ),
            "float32 or bfloat16",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()
