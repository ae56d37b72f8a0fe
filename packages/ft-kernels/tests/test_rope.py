"""ft_kernels.rope against its twin (reference.rope: ft_core's Rotary.apply in torch).

Bound, from the arithmetic: both compute each output as two fp32 products and one fp32 sum or difference,
each rounded once (the C++ file is built without FMA contraction), then one rounding to x's dtype -- the same
operations on the same values, so the results are equal bit for bit; any misplaced pair, sign or half fails.
"""

import ft_kernels as fk
import pytest
import torch
from ft_kernels import reference as R


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(
    "T,H,D,Rd", [(1, 16, 128, 128), (3, 4, 64, 32), (5, 2, 80, 64), (2, 1, 6, 2), (0, 4, 8, 8)]
)
def test_matches_reference(T, H, D, Rd, interleaved, dtype):
    g = torch.Generator().manual_seed(T * 100 + D)
    x = (torch.randn(T, H, D, generator=g) * 3).to(dtype)
    pos = torch.randint(0, 100000, (T,), generator=g).float()
    f = pos[:, None] * (1.0 / 10000 ** (torch.arange(0, Rd, 2).float() / Rd))[None]
    cos, sin = f.cos() * 1.1, f.sin() * 1.1
    got = fk.rope(x, cos, sin, interleaved)
    want = R.rope(x, cos, sin, interleaved)
    assert got.dtype == dtype and torch.equal(got, want)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda x, c: fk.rope(x[0], c, c), "x must be float32 or bfloat16"),
        (lambda x, c: fk.rope(x, c[:1], c), "cos must be float32"),
        (lambda x, c: fk.rope(x, c, c[:, :1]), "sin must be shaped"),
        (lambda x, c: fk.rope(x[..., :4], c, c), "rotates more than"),
    ],
)
def test_bad_arguments_raise_naming_them(call, match):
    x, c = torch.randn(2, 3, 16).bfloat16(), torch.randn(2, 4)
    with pytest.raises(ValueError, match=match):
        call(x, c)
