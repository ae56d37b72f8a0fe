"""The X16 formats with scales of their own (MXFP4_X16, INT4_SYM_X16, INT8_SYM_X16: 16 rows interleaved,
``csrc/cpu/formats.h``): the load-time repack (C++, in place) against its torch twins ``formats.nib_to_x16`` /
``formats.int8_to_x16``, the twins' inverses, and the rows-in-lanes bf16-activation kernels (AMD's AVX-512 BF16;
elsewhere the scalar twin reads the layout) against the fp32 bound and the row-wise kernel. Bound:
``fp32_bounds.linear_bound`` (every code value, or INT8's two parts of it, exact in bf16; bf16 products exact in
fp32)."""

import dataclasses
import os
import subprocess
import sys

import ft_kernels as fk
import pytest
import torch
from fp32_bounds import linear_bound
from ft_kernels import formats
from ft_kernels import reference as R

# (format, group): MXFP4's blocks of 32; INT4 in GGUF Q4_0's groups of 32 and ft convert's 128; INT8 in Q8_0's 32
# and in 64; FP8 in checkpoints' blocks of 128 columns, and 32
CASES = [
    ("mxfp4", 32),
    ("int4_sym", 32),
    ("int4_sym", 128),
    ("int8_sym", 32),
    ("int8_sym", 64),
    ("fp8_e4m3", 128),
    ("fp8_e4m3", 32),
]
BYTES = ("int8_sym", "fp8_e4m3")  # a byte a weight


def _weights(fmt, group, N, rows, cols, seed, top=True):
    """Every code, and for MXFP4 a spread of scales (2^-127 .. 2^12, and 2^127 where ``top``: e8m0 0 and 254) at
    random places; INT4 and INT8 (every byte: -128 too), FP8 (every code but NaN's, subnormals and -0 too): random
    positive and negative fp32 scales, ceil(cols / group) a row."""
    g = torch.Generator().manual_seed(seed)
    width = cols if fmt in BYTES else cols // 2
    q = torch.randint(0, 256, (N, rows, width), generator=g, dtype=torch.uint8)
    if fmt == "fp8_e4m3":
        q[(q & 0x7F) == 0x7F] -= 1
    if fmt != "mxfp4":
        s = torch.randn(N, rows, -(-cols // group), generator=g) * 0.01
        return fk.ExpertWeights(fmt, q, cols, s, group=group)
    s = torch.randint(100, 140, (N, rows, cols // 32), generator=g, dtype=torch.uint8)
    s.view(-1)[::7] = 0
    if top:
        s.view(-1)[3::11] = 254
    return fk.ExpertWeights(fmt, q, cols, s, group=32)


def _x16(w):
    """``w`` in its X16 format, by the twins."""
    q = formats.int8_to_x16(w.q) if w.fmt in BYTES else formats.nib_to_x16(w.q)
    return dataclasses.replace(
        w, fmt=f"{w.fmt}_x16", q=q, scale=formats.nib_to_x16(w.scale, scales=True)
    )


@pytest.mark.parametrize("fmt,group", CASES)
@pytest.mark.parametrize("rows,cols", [(16, 32), (48, 96), (32, 2880), (16, 512)])
def test_repack_in_place_equals_its_twin(fmt, group, rows, cols):
    """``fk.to_x16_(q, cols, fmt, scale)`` writes exactly the twin's bytes, codes and scales (16 scales a row
    included: not mistaken for codes; INT4 groups of 128 over 2880 columns: a partial last group), and the twin's
    inverse gives the matrix back: the same values (``R.dequantize``)."""
    w = _weights(fmt, group, 3, rows, cols, rows + cols)
    x = _x16(w)
    back = formats.int8_from_x16 if fmt in BYTES else formats.nib_from_x16
    assert torch.equal(back(x.q), w.q)
    assert torch.equal(formats.nib_from_x16(x.scale, scales=True), w.scale)
    qc, sc = w.q.clone(), w.scale.clone()
    assert fk.to_x16_(qc, cols, fmt, sc) is qc
    assert torch.equal(qc, x.q) and torch.equal(sc, x.scale)
    assert torch.equal(R.dequantize(x), R.dequantize(w))
    # the layout itself, one weight: row 16 + 5, column 32 + 8 + 4 + 2 (4-bit: block 1, p 1, high nibble of b 2;
    # int8: 4-column piece 11, byte 2)
    if rows >= 32 and cols >= 64:
        r, c = 21, 46
        if fmt in BYTES:
            assert x.q[0, 16:32].flatten()[64 * 11 + 4 * 5 + 2] == w.q[0, r, c]
        else:
            byte = x.q[0, 16:32].flatten()[256 + 64 + 4 * 5 + 2]
            assert int(byte >> 4) == int((w.q[0, r, c // 2] >> (4 * (c % 2))) & 15)
        k = c // group
        assert x.scale[0, 16:32].flatten()[16 * k + 5] == w.scale[0, r, k]


def test_repack_refuses_bad_shapes():
    z = torch.zeros
    with pytest.raises(ValueError, match="rows % 16"):
        fk.to_x16_(z(1, 40, 48, dtype=torch.uint8), 96, "mxfp4", z(1, 40, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="scale"):
        fk.to_x16_(z(1, 48, 48, dtype=torch.uint8), 96, "mxfp4")
    with pytest.raises(ValueError, match="cols / 2"):
        fk.to_x16_(z(1, 48, 40, dtype=torch.uint8), 96, "int4_sym", z(1, 48, 1))
    with pytest.raises(ValueError, match=r"q \[N, rows, cols\] and scale"):
        fk.to_x16_(z(1, 48, 48, dtype=torch.uint8), 96, "int8_sym", z(1, 48, 3))
    with pytest.raises(ValueError, match="float32"):
        fk.to_x16_(z(1, 48, 96, dtype=torch.uint8), 96, "int8_sym", z(1, 48, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="int8_sym or fp8_e4m3"):
        fk.to_x16_(z(1, 48, 48, dtype=torch.uint8), 96, "nvfp4", z(1, 48, 6, dtype=torch.uint8))
    with pytest.raises(ValueError, match="rows % 16"):
        formats.nib_to_x16(z(1, 40, 48, dtype=torch.uint8))


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 13, 16, 21])
@pytest.mark.parametrize("N,K", [(16, 2880), (64, 96), (48, 512), (32, 2048)])
@pytest.mark.parametrize("fmt,group", CASES)
def test_linear_bf16(fmt, group, N, K, T):
    """bf16 x against the X16 format: on AMD's AVX-512 BF16 the rows-in-lanes kernel (tiles of 8, 4, 3, 2 and 1
    tokens; 4, 2 or 1 blocks side by side and their tails; groups spanning blocks; INT8 from 12 tokens the
    tokens-in-lanes kernel on the rows put back, then the tail); on AVX2 the 16-bit-activation kernels (x in
    Q16Act's blocks: ``linear_bound``'s exact product is over those); elsewhere the scalar twin. Within the fp32
    bound of the exact product, and within both bounds (and the gap of the two exact products, where the
    kernels take x differently) of the row-wise kernel on the same weights."""
    w = _weights(fmt, group, 1, N, K, N + K + T, top=False)  # no overflow of the fp32 sums
    wx = _x16(w)
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, K, generator=g).bfloat16()
    exact, bound = linear_bound(x, wx)
    y = fk.linear(x, wx)
    assert y.shape == (T, N) and y.dtype == torch.float32
    over = (y.double() - exact).abs() - bound
    assert over.max().item() <= 0, f"error exceeds the fp32 bound by {over.max().item():.3g}"
    # the row-wise kernel may take x otherwise (AVX2: 16-bit blocks in one, not the other): each kernel within
    # its own bound of its own exact product, so they differ by at most both bounds and the exacts' gap
    exact_row, bound_row = linear_bound(x, w)
    gap = (exact - exact_row).abs()
    assert ((y.double() - fk.linear(x, w).double()).abs() <= bound + bound_row + gap).all()


@pytest.mark.parametrize("fmt", ["mxfp4_x16", "int4_sym_x16", "int8_sym_x16", "fp8_e4m3_x16"])
def test_nan_in_x_stays_in_its_token(fmt):
    """A NaN in one token's x makes that token's outputs NaN and no other's (the tiles share weights, not sums)."""
    g = torch.Generator().manual_seed(3)
    w = fk.quantize(torch.randn(1, 32, 256, generator=g), fmt, group=32)
    x = torch.randn(5, 256, generator=g).bfloat16()
    x[2, 77] = float("nan")
    y = fk.linear(x, w)
    assert torch.isnan(y[2]).all() and not torch.isnan(y[[0, 1, 3, 4]]).any()


@pytest.mark.parametrize("fmt", ["mxfp4_x16", "int4_sym_x16", "int8_sym_x16", "fp8_e4m3_x16"])
def test_rows_not_in_16s_and_odd_groups_are_refused(fmt):
    w = fk.quantize(torch.randn(1, 32, 64), fmt, group=32)
    bad = dataclasses.replace(w, q=w.q[:, :24].contiguous(), scale=w.scale[:, :24].contiguous())
    with pytest.raises(ValueError, match=f"{fmt} needs cols % 32"):
        fk.linear(torch.randn(1, 64), bad)
    if fmt != "mxfp4_x16":
        w16 = fk.quantize(torch.randn(1, 32, 64), fmt.removesuffix("_x16"), group=16)
        bad = dataclasses.replace(_x16(w16), fmt=fmt)
        with pytest.raises(ValueError, match="group % 32"):
            fk.linear(torch.randn(1, 64), bad)


def test_fp8_nan_codes_give_nan():
    """FP8_X16's table reads e4m3's NaN codes (0x7f, 0xff) as NaN, as torch's float8_e4m3fn does (the row-wise fp32
    kernel reads them as +-480): the row holding one gives NaN for every token, the others do not."""
    w = fk.quantize(
        torch.randn(1, 32, 64, generator=torch.Generator().manual_seed(5)), "fp8_e4m3", group=32
    )
    w.q[0, 3, 10] = 0x7F
    w.q[0, 20, 50] = 0xFF
    y = fk.linear(torch.randn(4, 64).bfloat16(), _x16(w))
    assert torch.isnan(y[:, [3, 20]]).all()
    assert not torch.isnan(y[:, [c for c in range(32) if c not in (3, 20)]]).any()


# fp32 scales, or f16 ones (formats.scales_f16)
GROUP_SCALED = [c for c in CASES if c[0] != "mxfp4"]


def _f16_pair(w):
    """X16 weights ``w`` with its scales made exact in f16: (fp32 scales, the same values as f16 scales)."""
    w32 = dataclasses.replace(w, scale=w.scale.half().float())
    w16 = dataclasses.replace(w32, scale=formats.scales_f16(w32.scale))
    assert w16.scale.dtype == torch.float16 and torch.equal(w16.scale.float(), w32.scale)
    return w32, w16


def test_scales_f16_only_where_every_scale_is_exact():
    """``scales_f16`` gives f16 when every scale converts exactly (subnormal f16 values too), and otherwise the
    fp32 tensor itself: one inexact value, one over f16's range, a NaN, already f16."""
    g = torch.Generator().manual_seed(1)
    s = (torch.randn(3, 32, 70, generator=g) * 0.01).half().float()
    s[0, 0, 0] = 2.0**-24  # f16's least subnormal
    h = formats.scales_f16(s)
    assert h.dtype == torch.float16 and h.shape == s.shape and torch.equal(h.float(), s)
    big = (torch.randn(5_000_000, generator=g) * 0.01).half().float()  # more than one chunk
    assert torch.equal(formats.scales_f16(big).float(), big)
    for bad in (1 / 3, 70000.0, float("nan")):
        t = s.clone()
        t[2, 31, 69] = bad
        assert formats.scales_f16(t) is t
    t = big.clone()
    t[-1] = 1 / 3  # in the last chunk
    assert formats.scales_f16(t) is t
    assert formats.scales_f16(h) is h


@pytest.mark.parametrize("T", [1, 2, 3, 8, 13, 21])
@pytest.mark.parametrize("fmt,group", GROUP_SCALED)
def test_f16_scales_give_the_fp32_scales_result_bit_for_bit(fmt, group, T):
    """INT4_SYM_X16, INT8_SYM_X16 and FP8_E4M3_X16 with f16 scales give exactly what the same values as fp32
    scales give (the kernel widens them exactly before the same FMAs; INT8's put-back prefill from 12 tokens
    too), in ``linear`` and in the MoE call; the reference reads them too."""
    w32, w16 = _f16_pair(_x16(_weights(fmt, group, 2, 64, 512, T, top=False)))
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, 512, generator=g).bfloat16()
    one = lambda w: dataclasses.replace(w, q=w.q[:1], scale=w.scale[:1])  # noqa: E731
    assert torch.equal(fk.linear(x, one(w16)), fk.linear(x, one(w32)))
    assert torch.equal(R.dequantize(w16), R.dequantize(w32))
    w2_32, w2_16 = _f16_pair(_x16(_weights(fmt, group, 2, 512, 32, T + 1, top=False)))
    tok = torch.arange(T, dtype=torch.int32).repeat_interleave(2)
    eid = torch.tensor([0, 1] * T, dtype=torch.int32)
    gate = torch.rand(2 * T, generator=g)
    y16 = fk.moe_experts(x, tok, eid, gate, w16, w2_16)
    assert torch.equal(y16, fk.moe_experts(x, tok, eid, gate, w32, w2_32))


def test_f16_scales_only_where_the_kernels_read_them():
    """The row-wise formats keep fp32 scales: f16 ones are refused naming the dtype they need."""
    w = _weights("int4_sym", 32, 1, 16, 64, 0)
    with pytest.raises(ValueError, match="w_scale must be float32 \\["):
        fk.linear(torch.randn(1, 64), dataclasses.replace(w, scale=w.scale.half()))
    wx = _x16(w)
    with pytest.raises(ValueError, match="float32 or float16"):
        fk.linear(torch.randn(1, 64), dataclasses.replace(wx, scale=wx.scale.bfloat16()))


@pytest.mark.parametrize("isa", fk.available_isas())
def test_f16_scales_on_each_isa(isa):
    """Where no rows-in-lanes kernel runs (FT_CPU_ISA; fresh process) the scalar twin reads f16 scales exactly
    too: f16 and fp32 scales give the same result, for fp32 and bf16 x."""
    code = f"""
import dataclasses, torch, ft_kernels as fk
from ft_kernels import formats
assert fk.active_isa() == {isa!r}
for fmt in ("int4_sym", "int8_sym", "fp8_e4m3"):
    w = fk.quantize(torch.randn(1, 32, 96), fmt + "_x16", group=32)
    w32 = dataclasses.replace(w, scale=w.scale.half().float())
    w16 = dataclasses.replace(w32, scale=formats.scales_f16(w32.scale))
    assert w16.scale.dtype == torch.float16
    for x in (torch.randn(3, 96), torch.randn(13, 96).bfloat16()):
        assert torch.equal(fk.linear(x, w16), fk.linear(x, w32)), (fmt, x.dtype)
"""
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FT_CPU_ISA": isa},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
