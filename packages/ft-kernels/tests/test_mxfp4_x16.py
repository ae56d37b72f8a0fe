"""MXFP4_X16 (MXFP4 with 16 rows interleaved, ``csrc/cpu/formats.h``): the load-time repack (C++, in place) against
its torch twin ``formats.mxfp4_to_x16``, the twin's inverse, and the rows-in-lanes bf16-activation kernel (AMD's
AVX-512 BF16; elsewhere the scalar twin reads the layout) against the fp32 bound and the row-wise kernel.
Bound: ``fp32_bounds.linear_bound`` (every e2m1 value and power-of-two scale exact, bf16 products exact in fp32)."""

import dataclasses

import ft_kernels as fk
import pytest
import torch
from fp32_bounds import linear_bound
from ft_kernels import formats
from ft_kernels import reference as R


def _mxfp4(N, rows, cols, seed, top=True):
    """Every code and a spread of scales (2^-127 .. 2^12, and 2^127 where ``top``: e8m0 0 and 254) at random
    places."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (N, rows, cols // 2), generator=g, dtype=torch.uint8)
    s = torch.randint(100, 140, (N, rows, cols // 32), generator=g, dtype=torch.uint8)
    s.view(-1)[::7] = 0
    if top:
        s.view(-1)[3::11] = 254
    return fk.ExpertWeights("mxfp4", q, cols, s, group=32)


@pytest.mark.parametrize("rows,cols", [(16, 32), (48, 96), (32, 2880), (16, 512)])
def test_repack_in_place_equals_its_twin(rows, cols):
    """``fk.to_x16_(q, cols, "mxfp4", scale)`` writes exactly the twin's bytes, codes and scales (cols / 32 = 16
    scales a row included: not mistaken for codes), and the twin's inverse gives the MXFP4 matrix back: the
    same values (``R.dequantize``)."""
    w = _mxfp4(3, rows, cols, rows + cols)
    q, s = formats.mxfp4_to_x16(w.q), formats.mxfp4_to_x16(w.scale, scales=True)
    assert torch.equal(formats.mxfp4_from_x16(q), w.q)
    assert torch.equal(formats.mxfp4_from_x16(s, scales=True), w.scale)
    qc, sc = w.q.clone(), w.scale.clone()
    assert fk.to_x16_(qc, cols, "mxfp4", sc) is qc
    assert torch.equal(qc, q) and torch.equal(sc, s)
    x16 = dataclasses.replace(w, fmt="mxfp4_x16", q=q, scale=s)
    assert torch.equal(R.dequantize(x16), R.dequantize(w))
    # the layout itself, one weight: row 16 + 5, column 32 + 8 + 4 + 2 (block 1, p 1, high nibble of b 2)
    if rows >= 32 and cols >= 64:
        r, c = 21, 46
        byte = q[0, 16:32].flatten()[256 + 64 + 4 * 5 + 2]
        assert int(byte >> 4) == int((w.q[0, r, c // 2] >> (4 * (c % 2))) & 15)
        assert int(s[0, 16:32].flatten()[16 + 5]) == int(w.scale[0, r, 1])


def test_repack_refuses_bad_shapes():
    with pytest.raises(ValueError, match="rows % 16"):
        fk.to_x16_(
            torch.zeros(1, 40, 48, dtype=torch.uint8),
            96,
            "mxfp4",
            torch.zeros(1, 40, 3, dtype=torch.uint8),
        )
    with pytest.raises(ValueError, match="scale"):
        fk.to_x16_(torch.zeros(1, 48, 48, dtype=torch.uint8), 96, "mxfp4")
    with pytest.raises(ValueError, match="cols / 32"):
        fk.to_x16_(
            torch.zeros(1, 48, 48, dtype=torch.uint8),
            96,
            "mxfp4",
            torch.zeros(1, 48, 2, dtype=torch.uint8),
        )
    with pytest.raises(ValueError, match="rows % 16"):
        formats.mxfp4_to_x16(torch.zeros(1, 40, 48, dtype=torch.uint8))


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 13, 16, 21])
@pytest.mark.parametrize("N,K", [(16, 2880), (64, 96), (48, 512), (32, 2048)])
def test_linear_bf16(N, K, T):
    """bf16 x against MXFP4_X16: on AMD's AVX-512 BF16 the rows-in-lanes kernel (tiles of 8, 4, 3, 2 and 1
    tokens; 4, 2 or 1 blocks side by side and their tails), elsewhere the scalar twin. Within the fp32 bound of
    the exact product, and within both bounds of the row-wise MXFP4 kernel on the same weights."""
    w = _mxfp4(1, N, K, N + K + T, top=False)  # no overflow of the fp32 sums
    wx = fk.quantize(torch.zeros(1, 16, 32), "mxfp4_x16")  # the format's fields, then this matrix
    wx = dataclasses.replace(
        wx, q=formats.mxfp4_to_x16(w.q), scale=formats.mxfp4_to_x16(w.scale, True), cols=K
    )
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, K, generator=g).bfloat16()
    exact, bound = linear_bound(x, wx)
    y = fk.linear(x, wx)
    assert y.shape == (T, N) and y.dtype == torch.float32
    over = (y.double() - exact).abs() - bound
    assert over.max().item() <= 0, f"error exceeds the fp32 bound by {over.max().item():.3g}"
    _, bound_row = linear_bound(x, w)
    assert ((y.double() - fk.linear(x, w).double()).abs() <= bound + bound_row).all()


def test_nan_in_x_stays_in_its_token():
    """A NaN in one token's x makes that token's outputs NaN and no other's (the tiles share weights, not sums)."""
    w = fk.quantize(
        torch.randn(1, 32, 256, generator=torch.Generator().manual_seed(3)), "mxfp4_x16"
    )
    x = torch.randn(5, 256).bfloat16()
    x[2, 77] = float("nan")
    y = fk.linear(x, w)
    assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3, 4]]).any()


def test_rows_not_in_16s_are_refused():
    w = fk.quantize(torch.randn(1, 32, 64), "mxfp4_x16")
    bad = dataclasses.replace(w, q=w.q[:, :24].contiguous(), scale=w.scale[:, :24].contiguous())
    with pytest.raises(ValueError, match="mxfp4_x16 needs"):
        fk.linear(torch.randn(1, 64), bad)
