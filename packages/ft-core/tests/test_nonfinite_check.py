"""all_finite: the one check a step pays (a sum first, the exact min/max pass only when the sum is not finite)
finds every NaN / inf, in float32 and bfloat16, and does not take an overflowing sum of finite values for one."""

import pytest
import torch

from ft_core.nonfinite import all_finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), None])
@pytest.mark.parametrize("where", [0, 777, 50256])
def test_all_finite_finds_each_non_finite(dtype, bad, where):
    t = torch.randn(1, 50257).to(dtype)
    if bad is not None:
        t[0, where] = bad
    assert all_finite(t) == (bad is None)


def test_opposite_infinities_and_overflowing_sum():
    t = torch.zeros(3, 100)
    t[0, 1], t[2, 5] = float("inf"), float("-inf")  # their sum is NaN, not a finite value
    assert not all_finite(t)
    big = torch.full((4, 1000), 3e38)  # every value finite, the sum overflows float32
    assert torch.isinf(big.sum())
    assert all_finite(big)
    assert all_finite(big.bfloat16())
    big[3, 999] = float("nan")
    assert not all_finite(big)
    assert all_finite(torch.empty(0, 5))
