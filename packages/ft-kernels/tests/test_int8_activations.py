"""Int8 activations (``act_int8``, opt-in) for the 4-bit and K-quant formats against their twins.

Two bounds, both from the arithmetic:
- against the reference that quantises x the same way (``reference.quantize_act_int8``): the integer
  dot products are exact, so ``ft_kernels.linear`` differs from float64 of (W, quantised x) by at most
  the fp32 bound of ``fp32_bounds.linear_bound`` (the kernel's own rounding, nothing else; K-quant kernels
  sum a weight's scaled code and its min / code offset apart, so their bound takes those terms' magnitudes);
- against exact activations: |W x - W xhat| <= sum over blocks of (d_b / 2) * sum |W| over the block,
  d_b = max|x_b| / 127 (each quantised value is within half a step), plus that fp32 bound.
The MoE call quantises x and the activation h; its result is checked against the reference twin that does
the same. The kernel's h differs from the twin's by fp32 rounding, so an element of h whose scaled value
lies at a rounding midpoint may quantise one step (d_h) the other way; the bound allows one step for every
element: |y - ref| <= sum over routes of |gate| * sum_j d_h(block of j) * |W2[:, j]| (+ 1e-5 of max |y|).
The integer dot products themselves are held to the fp32 bound by the linear tests above.
"""

import os
import subprocess
import sys

import dataclasses

import ft_kernels as fk
import pytest
import torch
from fp32_bounds import linear_bound
from ft_kernels import kquants
from ft_kernels import reference as R
from ft_kernels.formats import REPACKED
from test_i16_activations import _quantize
from test_kquants import random_blocks

Q4 = ["mxfp4", "nvfp4", "int4_sym", "int4_asym"]
# the X16 layouts (16 rows interleaved) with int8 rows-in-lanes kernels (x86_avx2_x16.h; AVX-512 VNNI:
# x86_avx512vnni_x16i16.cpp); "/f16": INT4 scales in f16 (GGUF Q4_0)
X16 = [f for f in REPACKED if f in R.INT8_FORMATS] + ["int4_sym_x16/f16"]
# the K-quants, row-wise and X16 (rows in the lanes: 16 rows interleaved; Q2_K_X16 does not exist)
KQ = list(kquants.FORMATS)


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 64])
@pytest.mark.parametrize("fmt", Q4)
def test_linear_int8_matches_quantised_reference(fmt, T):
    for N, K, group in (
        (37, 64, 32),
        (70, 96, 32),
        (9, 256, 128),
        (21, 416, 64),
        (12, 640, 256),
    ):  # 416: 3 chunks of 128 + 1 block; 256: the general group instance, a partial last group
        g = torch.Generator().manual_seed(N + K + T)
        w = fk.quantize(torch.randn(1, N, K, generator=g) * 0.1, fmt, group=group)
        x = torch.randn(T, K, generator=g) * torch.rand(
            T, K, generator=g
        )  # magnitudes vary inside a block
        y = fk.linear(x, w, act_int8=True)
        xhat = R.quantize_act_int8(x)
        exact, bound = linear_bound(xhat, w)
        over = ((y.double() - exact).abs() - bound).max().item()
        assert over <= 0, f"{fmt} T={T}: beyond the fp32 bound by {over:.3g}"
        # against exact x: half a quantisation step per element
        W = R.dequantize(w)[0].double()
        d = x.double().reshape(T, -1, 32).abs().amax(-1) / 127
        step = (d[:, None, :] * W.abs().reshape(N, -1, 32).sum(-1)[None]).sum(-1) / 2  # [T, N]
        err = (y.double() - x.double() @ W.T).abs()
        assert (err <= step + bound + 1e-12).all()


def check_kquant_int8(fmt, T, blocks=None):
    """``ft_kernels.linear`` with int8 activations on a K-quant matrix: within the fp32 bound of (W, quantised
    x) and within half a quantisation step per element of the exact product. ``blocks``: arbitrary valid
    blocks (every scale, min and code value) instead of the quantiser's."""
    x16 = fmt.endswith("_x16")  # whole groups of 16 rows
    base = fmt.removesuffix("_x16")
    for N, K in ((48, 256), (16, 768), (32, 512)) if x16 else ((37, 256), (9, 768), (21, 512)):
        g = torch.Generator().manual_seed(N + K + T)
        if blocks is None:
            w = fk.quantize(torch.randn(1, N, K, generator=g) * 0.1, fmt)
        else:
            b = blocks(base, N * K // 256, seed=N + T).reshape(N, -1)
            w = fk.ExpertWeights(fmt, kquants.to_x16(b, K, base) if x16 else b, K, group=256)
            w = dataclasses.replace(w, q=w.q[None])
        x = torch.randn(T, K, generator=g) * torch.rand(T, K, generator=g)
        y = fk.linear(x, w, act_int8=True)
        xhat = R.quantize_act_int8(x)
        exact, bound = linear_bound(xhat, w, split_terms=True, q3k_offset=True)
        over = ((y.double() - exact).abs() - bound).max().item()
        assert over <= 0, f"{fmt} T={T} [{N}, {K}]: beyond the fp32 bound by {over:.3g}"
        W = R.dequantize(w)[0].double()
        d = x.double().reshape(T, -1, 32).abs().amax(-1) / 127
        step = (d[:, None, :] * W.abs().reshape(N, -1, 32).sum(-1)[None]).sum(-1) / 2
        assert ((y.double() - x.double() @ W.T).abs() <= step + bound + 1e-12).all()


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 64])
@pytest.mark.parametrize("fmt", KQ)
def test_kquant_linear_int8_matches_quantised_reference(fmt, T):
    check_kquant_int8(fmt, T)


@pytest.mark.parametrize("fmt", KQ)
def test_kquant_int8_on_arbitrary_blocks(fmt):
    for T in (1, 4, 6):
        check_kquant_int8(fmt, T, blocks=random_blocks)


def test_x16_rows_padded_as_in_mixed_banks():
    """q4_k_x16 in a bank whose rows are padded to a wider K-quant's (Q6_K): the tiles stay one gapless
    stream with the padding at each matrix's end, and the kernels give what they give unpadded, bit for bit."""
    g = torch.Generator().manual_seed(3)
    w = fk.quantize(torch.randn(3, 32, 768, generator=g) * 0.1, "q4_k")
    padded = torch.nn.functional.pad(w.q, (0, 3 * 210 - 3 * 144))
    a = fk.ExpertWeights("q4_k_x16", kquants.to_x16(w.q, 768), 768, group=256)
    b = fk.ExpertWeights("q4_k_x16", kquants.to_x16(padded, 768), 768, group=256)
    assert torch.equal(kquants.from_x16(b.q, 768), padded)
    assert not b.q.reshape(3, -1)[:, 32 * 432 :].any()  # the padding after the tiles
    for T in (1, 5):
        x = torch.randn(T, 768, generator=g)
        for e in range(3):
            one = lambda w: dataclasses.replace(w, q=w.q[e : e + 1])  # noqa: E731
            assert torch.equal(
                fk.linear(x, one(a), act_int8=True), fk.linear(x, one(b), act_int8=True)
            )


@pytest.mark.parametrize(
    "fmt,pad",
    [
        ("q4_k", 0),
        ("q4_k", 3 * 210 - 3 * 144),
        ("q5_k", 0),
        ("q5_k", 3 * 210 - 3 * 176),
        ("q6_k", 0),
        ("q6_k", 7),
        ("q3_k", 0),
        ("q3_k", 3 * 210 - 3 * 110),
    ],
)
def test_x16_repack_in_place_equals_its_twin(fmt, pad):
    """ft_kernels.to_x16_ (C++, in place, on the pool) writes exactly the bytes of kquants.to_x16 (torch), rows
    padded or not, on blocks of every scale, min and code value, and from_x16 gives the blocks back; bad shapes
    and formats are refused by name."""
    bb = kquants.BLOCK_BYTES[fmt]
    b = random_blocks(fmt, 5 * 48 * 3, seed=11).reshape(5, 48, 3 * bb)
    q = torch.nn.functional.pad(b, (0, pad)).contiguous()
    want = kquants.to_x16(q, 768, fmt)
    assert torch.equal(kquants.from_x16(want, 768, fmt), q)
    assert torch.equal(fk.to_x16_(q, 768, fmt), want)
    with pytest.raises(ValueError, match="rows % 16"):
        fk.to_x16_(torch.zeros(1, 40, 3 * bb, dtype=torch.uint8), 768, fmt)
    with pytest.raises(ValueError, match="int8_sym or fp8_e4m3, got"):
        fk.to_x16_(torch.zeros(1, 48, 3 * bb, dtype=torch.uint8), 768, "q2_k")


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 17])
@pytest.mark.parametrize("fmt", X16)
def test_x16_linear_int8(fmt, T):
    """The X16 layouts with int8 x: a SIMD kernel on x86 (``int8_simd``), within the fp32 bound of (W,
    quantised x) with the kernels' split terms (code offset, min), T = 1..17 (tiles of 8 / 4 and their
    remainders), K up to 2048, INT4 groups of 32 and 128."""
    base = fmt.removesuffix("/f16")
    if fk.active_isa() in ("avx2", "avx512", "avx512bf16"):
        assert fk.int8_simd(base), fmt
    for N, K, group in ((48, 256, 32), (32, 768, 128), (16, 2048, 32)):
        g = torch.Generator().manual_seed(N + K + T)
        w = _quantize(torch.randn(1, N, K, generator=g) * 0.1, fmt, group)
        x = torch.randn(T, K, generator=g) * torch.rand(T, K, generator=g)
        y = fk.linear(x, w, act_int8=True)
        exact, bound = linear_bound(R.quantize_act_int8(x), w, split_terms=True, q3k_offset=True)
        over = ((y.double() - exact).abs() - bound).max().item()
        assert over <= 0, (
            f"{fmt} T={T} [{N}, {K}] group {group}: beyond the fp32 bound by {over:.3g}"
        )


@pytest.mark.parametrize("fmt", ["bf16", "fp8_e4m3"])
def test_other_formats_ignore_int8(fmt):
    w = fk.quantize(torch.randn(1, 40, 64) * 0.1, fmt, group=32)
    x = torch.randn(3, 64)
    assert torch.equal(fk.linear(x, w, act_int8=True), fk.linear(x, w))


def test_columns_not_a_multiple_of_32_keep_fp32():
    w = fk.quantize(torch.randn(1, 40, 48) * 0.1, "int4_sym", group=16)
    x = torch.randn(2, 48)
    assert torch.equal(fk.linear(x, w, act_int8=True), fk.linear(x, w))


@pytest.mark.parametrize("T", [1, 4, 7, 40])
@pytest.mark.parametrize("fmt", Q4 + KQ + [f for f in X16 if f not in KQ])
def test_moe_int8_matches_quantised_reference(fmt, T):
    g = torch.Generator().manual_seed(T)
    # K-quants: whole super-blocks; X16: rows in 16s
    H, I, N = (256, 256, 4) if fmt in KQ or fmt in X16 else (128, 96, 5)
    w13 = _quantize(torch.randn(N, 2 * I, H, generator=g) * 0.1, fmt, 32)
    w2 = _quantize(torch.randn(N, H, I, generator=g) * 0.1, fmt, 32)
    x = torch.randn(T, H, generator=g)
    R_ = 2 * T + 3
    tok = torch.randint(0, T, (R_,), generator=g, dtype=torch.int32)
    eid = torch.randint(0, N, (R_,), generator=g, dtype=torch.int32)
    gate = torch.rand(R_, generator=g)
    W13, W2 = R.dequantize(w13), R.dequantize(w2)
    xhat = R.quantize_act_int8(x).float()
    for act in ("swiglu", "gptoss"):
        y = fk.moe_experts(x, tok, eid, gate, w13, w2, act=act, act_int8=True)
        ref = R.moe_experts(x, tok, eid, gate, w13, w2, act=act, act_int8=True)
        bound = torch.zeros_like(ref)
        for t, e, gw in zip(tok.tolist(), eid.tolist(), gate.tolist()):
            h = R.expert_act(W13[e] @ xhat[t], act)
            d = h.abs().reshape(-1, 32).amax(-1).repeat_interleave(32) * 1.001 / 127
            bound[t] += abs(gw) * (W2[e].abs() @ d)
        assert ((y - ref).abs() <= bound + 1e-5 * ref.abs().max()).all()
        exact = R.moe_experts(x, tok, eid, gate, w13, w2, act=act)
        assert not torch.equal(y, exact)  # the opt-in really quantised


# AVX2 with AVX-VNNI (Intel desktops): the X16 kernels' `vpdpbusd` build by default, the AVX2 one (`vpmaddubsw`)
# under FT_AVX_VNNI=0 (as a Zen 2/3 machine runs)
_AVX_VNNI = os.path.exists("/proc/cpuinfo") and " avx_vnni" in open("/proc/cpuinfo").read()  # noqa: SIM115
RUNS = [(i, "") for i in fk.available_isas()] + (
    [("avx2", "0")] if _AVX_VNNI and "avx2" in fk.available_isas() else []
)


@pytest.mark.parametrize(
    ("isa", "vnni"), RUNS, ids=[f"{i}{'-novnni' if v else ''}" for i, v in RUNS]
)
def test_each_isa(isa, vnni):
    """The linear and MoE checks above on each ISA this CPU has (FT_CPU_ISA in a fresh process); AVX-512 CPUs
    run the AVX2 row-wise q8 kernels; AVX2 with AVX-VNNI both with it and without."""
    code = f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import ft_kernels as fk
assert fk.active_isa() == {isa!r}
import test_int8_activations as t
for fmt in t.Q4:
    for T in (1, 3, 8):
        t.test_linear_int8_matches_quantised_reference(fmt, T)
    t.test_moe_int8_matches_quantised_reference(fmt, 4)
for fmt in t.KQ:
    for T in (1, 3, 8):
        t.check_kquant_int8(fmt, T)
    t.test_kquant_int8_on_arbitrary_blocks(fmt)
    t.test_moe_int8_matches_quantised_reference(fmt, 4)
for fmt in t.X16:
    for T in (1, 3, 8, 9):
        t.test_x16_linear_int8(fmt, T)
    t.test_moe_int8_matches_quantised_reference(fmt, 7)
"""
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FT_CPU_ISA": isa, "FT_AVX_VNNI": vnni},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
