"""ft_kernels.linear (dense x W^T + b on the kernel pool) against its twins: every format, ragged shapes,
T = 1..64, bias, x in fp32 and bf16 (bf16 products exact, so the same fp32 bound), the pool and the calling-thread
paths, the ISAs this CPU has.
Bound: elementwise, the fp32 arithmetic's own (``fp32_bounds.linear_bound``) against float64."""

import os
import re
import subprocess
import sys

import ft_kernels as fk
import pytest
import torch
from fp32_bounds import linear_bound
from ft_kernels import kquants
from ft_kernels import reference as R

# (N, K): ragged against vector widths (8/16), the paired chunks (16/32) and groups (32)
# and the 4-bit table kernels' chunks of 128 columns (whole ones and a partial last one)
SHAPES = {
    "any": [(37, 72), (300, 130), (9, 34)],
    "mxfp4": [(37, 96), (70, 64), (21, 288)],
    **{
        k: [(48, 96), (16, 2880), (32, 288)]
        for k in ("mxfp4_x16", "int4_sym_x16", "int8_sym_x16", "fp8_e4m3_x16")
    },  # whole 16-row groups
    "nvfp4": [(37, 80), (70, 48), (21, 272)],
    # K-quants: whole super-blocks of 256 columns; ragged rows against the tiles' 1..8 rows
    **{k: [(37, 256), (9, 768), (21, 512)] for k in ("q4_k", "q5_k", "q6_k", "q3_k", "q2_k")},
    **{k: [(48, 256), (16, 768), (32, 512)] for k in kquants.X16},  # whole 16-row groups
}


def _check(y, x, w, b=None):
    exact, bound = linear_bound(x, w, b)
    assert y.dtype == torch.float32 and y.shape == exact.shape
    over = ((y.double() - exact).abs() - bound).max().item()
    assert over <= 0, f"error exceeds the fp32 bound by {over:.3g}"


def _weights(fmt, N, K, seed, bias=False):
    g = torch.Generator().manual_seed(seed)
    w = fk.quantize(torch.randn(1, N, K, generator=g) * 0.1, fmt, group=32)
    return w, (torch.randn(N, generator=g) if bias else None), g


@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 17, 64])
@pytest.mark.parametrize("fmt", list(fk.FORMATS))
def test_matches_bound(fmt, T, xdtype):
    for N, K in SHAPES.get(fmt, SHAPES["any"]):
        w, b, g = _weights(fmt, N, K, seed=N + K + T, bias=T % 2 == 1)
        x = torch.randn(T, K, generator=g).to(xdtype)
        _check(fk.linear(x, w, b), x, w, b)
        assert torch.allclose(fk.linear(x, w, b), R.linear(x, w, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "N,K,T",
    [
        (42, 2048, 6),
        (42, 2048, 7),
        (42, 2048, 8),
        (42, 4096, 3),
        (42, 4096, 4),
        (42, 7168, 2),
        (42, 7168, 3),
    ],
)
def test_bf16_one_pass_and_tiles(N, K, T):
    """BF16 weights, bf16 x: the kernel streams a call in one pass while its tokens' x rows fit ~30 KiB of L1
    (``bf16_stream_tokens``: 7 tokens at 2048 columns, 3 at 4096, 2 at 7168), else tiles of 4 rows and 4 tokens
    (rows not in whole 4s here). Either way within the fp32 bound of the exact result."""
    w, b, g = _weights("bf16", N, K, seed=N + K + T, bias=True)
    x = torch.randn(T, K, generator=g).bfloat16()
    _check(fk.linear(x, w, b), x, w, b)


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 13, 16, 21])
@pytest.mark.parametrize("N,K", [(16, 2048), (64, 768), (48, 256)])
@pytest.mark.parametrize("base", ["q4_k", "q5_k", "q6_k", "q3_k"])
def test_x16_bf16(base, N, K, T):
    """Q4_K_X16 / Q5_K_X16 / Q6_K_X16 / Q3_K_X16 with bf16 x: on AMD's AVX-512 BF16 the rows-in-lanes kernels (tiles of 8, 4,
    3, 2 and 1 tokens; two sub-blocks side by side). Q4_K_X16's and Q5_K_X16's sums of (128 + q) x take 128 d sc
    sum(x) off with the min,
    Q6_K_X16's multiply q - 32 from a table: bounded over the terms each sums (``fp32_bounds.kquant_terms``)
    against float64, and within the sum of both bounds of the row-wise kernel on the same blocks."""
    g = torch.Generator().manual_seed(N + K + T)
    w = fk.quantize(torch.randn(1, N, K, generator=g) * 0.1, base)
    wx = fk.ExpertWeights(f"{base}_x16", kquants.to_x16(w.q.clone(), K, base), K, group=256)
    x = torch.randn(T, K, generator=g).bfloat16()
    exact, bound = linear_bound(x, wx, split_terms=True)
    y = fk.linear(x, wx)
    over = ((y.double() - exact).abs() - bound).max().item()
    assert over <= 0, f"error exceeds the fp32 bound by {over:.3g}"
    _, bound_row = linear_bound(x, w, split_terms=True)
    assert ((y.double() - fk.linear(x, w).double()).abs() <= bound + bound_row).all()


@pytest.mark.parametrize("T", [7, 8, 12, 16, 23, 40])
@pytest.mark.parametrize(
    "fmt,group",
    [
        ("mxfp4", 32),
        ("int8_sym", 32),
        ("int8_sym", 64),
        ("int4_sym", 32),
        ("int4_sym", 64),
        ("int4_sym", 128),
        ("q4_k", 256),
        ("q5_k", 256),
        ("q6_k", 256),
        ("q3_k", 256),
        ("q2_k", 256),
    ],
)
def test_prefill_sized_bf16(fmt, group, T):
    """bf16 x from 7 tokens a call: on AVX-512 BF16 the tokens-in-lanes kernel (16 lanes, 8 for 7-8 K-quant
    tokens, the tail row-wise; INT8's tail through the fp32 kernel) on whole blocks of 64 (MXFP4, INT4, INT8)
    or 256 columns (K-quants), 8-row tiles and single rows (37 rows); 64-column formats also at 2 x 640."""
    for N, K in ((37, 512), (2, 640)) if group != 256 else ((37, 512),):
        g = torch.Generator().manual_seed(N + K + T)
        w = fk.quantize(torch.randn(1, N, K, generator=g) * 0.1, fmt, group=group)
        x = torch.randn(T, K, generator=g).bfloat16()
        exact, bound = linear_bound(x, w, split_terms=True)
        over = ((fk.linear(x, w).double() - exact).abs() - bound).max().item()
        assert over <= 0, f"error exceeds the fp32 bound by {over:.3g}"


@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["int4_sym", "int4_asym"])
@pytest.mark.parametrize("group", [32, 64, 128, 256, 384])
def test_int4_lane_groups(fmt, group, xdtype):
    """Groups of 32, 64 or a multiple of 128 columns (ft's experts: 128, GGUF Q4_0: 32) take the AVX-512
    table kernels, each group size its own instance (256 and 384: the general one): whole and partial
    chunks, a partial last group, 1..9 tokens (1: the row-streaming path with its prefetches)."""
    for K in (128, 384, 520):
        for T in (1, 4, 9):
            g = torch.Generator().manual_seed(K + T)
            w = fk.quantize(torch.randn(1, 33, K, generator=g) * 0.1, fmt, group=group)
            x = torch.randn(T, K, generator=g).to(xdtype)
            _check(fk.linear(x, w), x.float(), w)


@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_every_scale_byte(fmt, xdtype):
    """The AVX-512 kernels decode scale bytes arithmetically (e8m0 into the exponent field, e4m3 shifted and
    rescaled): every byte whose scale keeps the products finite, subnormal e4m3 and e8m0 0 (2^-127) included,
    against the bound of the scalar definition."""
    if fmt == "mxfp4":
        codes = torch.arange(0, 160, dtype=torch.uint8)  # 2^-127 .. 2^32: x * 6 * 2^32 stays finite
    else:
        codes = torch.tensor(
            [c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8
        )  # 0x7f / 0xff: NaN
    blk = 32 if fmt == "mxfp4" else 16
    K = 256
    N = -(-len(codes) // (K // blk))
    g = torch.Generator().manual_seed(len(codes))
    q = torch.randint(0, 256, (1, N, K // 2), generator=g, dtype=torch.uint8)
    sc = torch.cat([codes, codes[: N * (K // blk) - len(codes)]]).view(1, N, K // blk)
    w = fk.ExpertWeights(
        fmt, q, K, scale=sc.contiguous(), group=blk, global_scale=0.5 if fmt == "nvfp4" else 1.0
    )
    for T in (1, 3):
        x = torch.randn(T, K, generator=g).to(xdtype)
        _check(fk.linear(x, w), x, w)


@pytest.mark.parametrize("fmt", ["bf16", "q4_k", "int4_sym", "int8_sym"])
@pytest.mark.parametrize(
    "N,T", [(37, 1), (300, 5), (3000, 3)]
)  # calling thread and pool, ragged blocks
def test_bf16_result_is_the_fp32_result_rounded_once(fmt, N, T):
    """out_dtype=bfloat16: each block's fp32 sums (+ bias) rounded in the kernel -- bit for bit the fp32
    result rounded, for both x dtypes."""
    K = 256 if fmt == "q4_k" else 512
    w, b, g = _weights(fmt, N, K, seed=N + T, bias=True)
    for x in (torch.randn(T, K, generator=g), torch.randn(T, K, generator=g).bfloat16()):
        y = fk.linear(x, w, b, out_dtype=torch.bfloat16)
        assert y.dtype == torch.bfloat16 and torch.equal(y, fk.linear(x, w, b).bfloat16())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_plain_tensors_bf16_input_and_the_pool(dtype):
    """A [N, K] tensor of > 1 MiB (the pool runs it), x in bf16: the same bound."""
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(700, 1040, generator=g) * 0.05).to(dtype)
    for T in (1, 4, 7):
        x = torch.randn(T, 1040, generator=g).bfloat16()
        _check(fk.linear(x, w), x.float(), w.float())
    out = torch.empty(2, 700)
    x = torch.randn(2, 1040, generator=g)
    assert fk.linear(x, w, out=out) is out
    _check(out, x, w.float())


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda w: fk.linear(torch.randn(2, 63), w), "x has 63 columns, w has K=64"),
        (lambda w: fk.linear(torch.randn(2, 64).double(), w), "x must be float32 or bfloat16"),
        (
            lambda w: fk.linear(torch.randn(2, 64), w, bias=torch.zeros(5)),
            r"bias must be float32 \[N=32\]",
        ),
        (
            lambda w: fk.linear(torch.randn(2, 64), w, out=torch.empty(2, 31)),
            r"y must be float32 or bfloat16 \[T, N\] = \[2, 32\]",
        ),
        (
            lambda w: fk.linear(torch.randn(2, 64), w.float()),
            "w must be a \\[N, K\\] bfloat16 or float16 tensor",
        ),
        (
            lambda w: fk.linear(
                torch.randn(2, 64),
                fk.ExpertWeights("bf16", w[None].expand(2, 32, 64).contiguous(), 64),
            ),
            "w must hold one matrix",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call(torch.randn(32, 64).bfloat16())


@pytest.mark.parametrize("isa", fk.available_isas())
def test_each_isa(isa):
    code = f"""
import sys, torch, ft_kernels as fk
from ft_kernels import kquants
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from fp32_bounds import linear_bound
assert fk.active_isa() == {isa!r}
for fmt in fk.FORMATS:
    kq = fmt in kquants.FORMATS  # whole super-blocks of 256 columns
    N = 48 if fmt.endswith("_x16") else 45  # whole groups of 16 rows
    for T, K, group, xd in ((1, 96, 32, torch.float32), (1, 288, 128, torch.bfloat16), (2, 96, 32, torch.float32),
                            (3, 96, 32, torch.bfloat16), (4, 288, 128, torch.bfloat16), (6, 288, 128, torch.bfloat16),
                            (8, 288, 128, torch.float32), (20, 288, 128, torch.bfloat16)):  # <= 8 tokens: rows streamed
        K = 256 * (K // 96) if kq else K
        g = torch.Generator().manual_seed(T)
        w = fk.quantize(torch.randn(1, N, K, generator=g) * .1, fmt, group=group)
        x = torch.randn(T, K, generator=g).to(xd); b = torch.randn(N, generator=g)
        exact, bound = linear_bound(x, w, b)
        assert ((fk.linear(x, w, b).double() - exact).abs() <= bound).all(), (fmt, T)
for K in (8, 40, 72, 520):  # one token, bf16 x and weights: 32- and 16-column steps and scalar tails (AVX2's own kernel)
    g = torch.Generator().manual_seed(K)
    w = fk.quantize(torch.randn(1, 21, K, generator=g) * .1, "bf16")
    x = torch.randn(1, K, generator=g).bfloat16()
    exact, bound = linear_bound(x, w)
    assert ((fk.linear(x, w).double() - exact).abs() <= bound).all(), ("bf16 one token", K)
"""
    # the 4-bit bf16-x kernels on and off (test_moe_experts); the AVX-512 X16 kernels' prefetch each way
    runs = (
        [("0", "nta"), ("1", "l2")]
        if isa == "avx512bf16"
        else [("", "l2" if isa == "avx512" else "")]
    )
    for nib, prefetch in runs:
        res = subprocess.run(
            [sys.executable, "-c", code],
            env={
                **os.environ,
                "FT_CPU_ISA": isa,
                "FT_BF16_NIBBLES": nib,
                "FT_X16_PREFETCH": prefetch,
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr[-3000:]


def test_x16_prefetch_choice():
    """The AVX-512 X16 kernels prefetch non-temporally on Zen 5 (AMD family 0x1A) and into L2 elsewhere;
    FT_X16_PREFETCH=nta or l2 forces one, and any other value is refused naming the variable (the kernels, which read
    it at load, go on with the default)."""
    cpuinfo = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""  # noqa: SIM115
    zen5 = (
        "AuthenticAMD" in cpuinfo and re.search(r"^cpu family\s*:\s*26$", cpuinfo, re.M) is not None
    )
    code = (
        "import ft_kernels as fk, torch\n"
        "try:\n    print(fk.x16_prefetch())\nexcept ValueError as e:\n    print(e)\n"
        "try:\n    fk.linear(torch.ones(1, 256).bfloat16(), fk.quantize(torch.ones(1, 16, 256), 'mxfp4'))\n"
        "except ValueError as e:\n    print(e)\n"
    )
    for value, want in (("", "nta" if zen5 else "l2"), ("nta", "nta"), ("l2", "l2"), ("L1", None)):
        res = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "FT_X16_PREFETCH": value},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        lines = res.stdout.split("\n")
        if want:
            assert lines[0] == want and lines[1] == "", res.stdout
        else:
            assert lines[0] == lines[1] == "FT_X16_PREFETCH=L1 is not nta or l2", res.stdout
