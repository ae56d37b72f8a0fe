"""ft_kernels.rms_norm against its twin (reference.rms_norm, transformers' RMSNorm) over shapes and dtypes.

Bound, from the arithmetic: kernel and twin sum the D squares in different orders, so their 1 / sqrt(mean + eps)
agree to (D + 4) u relative (u = 2^-24). In float32 each output is within that plus two roundings of the twin.
In bfloat16 the normalised value is rounded to bf16 (relative 2^-9) before the product with w (rounded again):
where the fp32 difference straddles a bf16 midpoint the results may differ by one bf16 step at each rounding,
so the bound is 2 * 2^-8 |y| relative, and all but a few elements are equal.
"""

import ft_kernels as fk
import pytest
import torch
from ft_kernels import reference as R

U = 2.0**-24


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape",
    # the last two: >= 2^16 elements, on the kernel pool in blocks of rows (the last block short)
    [
        (1, 2048),
        (3, 128),
        (2, 16, 128),
        (5, 4, 64),
        (1, 7),
        (4, 4096),
        (0, 32),
        (40, 2048),
        (300, 257),
    ],
)
def test_matches_reference(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(*shape, generator=g) * torch.rand(shape[-1], generator=g) * 3).to(dtype)
    w = (torch.rand(shape[-1], generator=g) * 2 - 0.5).to(dtype)
    y, ref = fk.rms_norm(x, w, 1e-6), R.rms_norm(x, w, 1e-6)
    assert y.dtype == dtype and y.shape == x.shape
    if x.numel() == 0:
        return
    D = shape[-1]
    diff = (y.double() - ref.double()).abs()
    if dtype == torch.float32:
        assert (diff <= (D + 8) * U * ref.double().abs() + 1e-30).all()
    else:
        assert (diff <= 2 * 2.0**-8 * ref.double().abs() + 1e-30).all()
        assert (diff > 0).float().mean() < 0.01  # rounding flips are rare


def test_eps_and_zero_rows():
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    w = torch.ones(64, dtype=torch.bfloat16)
    assert torch.equal(fk.rms_norm(x, w, 1e-5), torch.zeros_like(x))
    x = torch.full((1, 64), 3.0)
    torch.testing.assert_close(fk.rms_norm(x, torch.ones(64), 0.0), torch.ones(1, 64))


@pytest.mark.parametrize(
    "bad, match",
    [
        (
            lambda: fk.rms_norm(torch.randn(2, 8).double(), torch.ones(8).double(), 1e-6),
            "x must be float32 or bfloat16",
        ),
        (lambda: fk.rms_norm(torch.randn(2, 8), torch.ones(9), 1e-6), "w must be \\[D=8\\]"),
        (
            lambda: fk.rms_norm(torch.randn(2, 8), torch.ones(8).bfloat16(), 1e-6),
            "in x.s dtype or float32",
        ),
    ],
)
def test_bad_arguments_name_the_argument(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
