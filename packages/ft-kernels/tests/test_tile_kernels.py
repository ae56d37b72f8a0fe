"""AMX tile kernels (``arch/x86_amx_x16.cpp``, ``arch/x86_amx_q6k.cpp``): prefill-sized products of bf16 x with
Q4_K_X16, MXFP4_X16, INT4_SYM_X16, INT8_SYM_X16, FP8_E4M3_X16 and row-wise Q6_K weights on the tile unit's
``tdpbf16ps``.

Every weight (the codes, MXFP4's codes with the power-of-two scale in their exponents, INT8's two parts) and
every product with a bf16 x is exact in fp32, so ``linear`` and ``moe_experts`` lie within the fp32 bound of
float64 over (W, x as given)
(``fp32_bounds.linear_bound`` / ``moe_bound``, whose ``kernel_x`` leaves x exact where the tiles run). Where the
16-bit kernels would run instead (Intel's default below 16 tokens) x is rounded to 16-bit blocks: a block holding
1024 puts the tiles' result far nearer the exact x's than those blocks', which shows the tiles ran. Runs where the
CPU has AMX-BF16 and Linux grants the tile state (Sapphire Rapids and later Xeons); skipped elsewhere."""

import dataclasses
import os
import subprocess
import sys

import ft_kernels as fk
import pytest
import torch
from fp32_bounds import linear_bound, moe_bound
from ft_kernels import kquants
from ft_kernels import reference as R
from ft_kernels.formats import scales_f16

pytestmark = pytest.mark.skipif(
    not fk.bf16_tiles("q4_k_x16"), reason="no AMX-BF16 tiles on this CPU / OS (or FT_AMX=0)"
)

# "/f16": INT4 scales in f16 (GGUF Q4_0's); int4 groups of 32 (Q4_0), 64, 128 (ft convert --format int4)
FMTS = [
    "q4_k_x16",
    "mxfp4_x16",
    "int4_sym_x16",
    "int4_sym_x16/f16",
    "q6_k",
    "int8_sym_x16/f16",
    "fp8_e4m3_x16",
]


def _weights(N: int, K: int, fmt: str, group: int, seed: int, n: int = 1) -> fk.ExpertWeights:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, N, K, generator=g) * 0.05
    if fmt in kquants.X16:
        return fk.ExpertWeights(
            fmt, kquants.to_x16(fk.quantize(w, "q4_k").q, K, "q4_k"), K, group=256
        )
    if fmt in ("q6_k", "q5_k"):
        return fk.quantize(w, fmt)
    out = fk.quantize(w, fmt.removesuffix("/f16"), group=group)
    if fmt.endswith("/f16"):
        out = dataclasses.replace(out, scale=scales_f16(out.scale.half().float()))
    return out


def _check(y: torch.Tensor, x: torch.Tensor, w, what) -> None:
    exact, bound = linear_bound(x, w, split_terms=True)
    over = (y.double() - exact).abs() - bound
    assert (over <= 0).all(), (what, over.max().item())


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("K", [256, 768, 2048])
def test_linear_within_the_fp32_bound(fmt, K):
    """Token counts around the tiles of 16 and the passes of 32 (16..100), rows in one to ten groups of 16 (Q6_K,
    row-wise: also a last group of 8), INT4 in groups of 32 / 64 / 128 (a partial last group where K is not a
    multiple)."""
    assert fk.bf16_tiles(fmt.removesuffix("/f16"))
    groups = [32, 64, 128] if fmt.startswith("int4") else [32]
    for group in groups:
        for N in (16, 40, 160) if fmt == "q6_k" else (16, 48, 160):
            w = _weights(N, K, fmt, group, N + K + group)
            for T in (16, 17, 31, 32, 33, 64, 100):
                g = torch.Generator().manual_seed(T)
                x = (
                    torch.randn(T, K, generator=g) * torch.exp(torch.randn(T, K, generator=g))
                ).bfloat16()
                _check(fk.linear(x, w), x, w, (fmt, group, N, K, T))


@pytest.mark.parametrize("fmt", ["q4_k_x16", "int4_sym_x16/f16", "q6_k"])
def test_x_is_taken_as_it_is(fmt):
    """One 1024 a block of 32: the 16-bit blocks (below 16 tokens here) round the other elements to 1/16; the
    tiles (from 16 tokens) do not, so their result lies far nearer the exact x's."""
    K = 512
    w = _weights(64, K, fmt, 32, 1)
    W = R.dequantize(w)[0].double()
    for T in (16, 40):
        x = torch.randn(T, K, generator=torch.Generator().manual_seed(T)).bfloat16()
        x[:, ::32] = 1024
        y = fk.linear(x, w).double()
        off_exact = (y - x.double() @ W.T).abs().max()
        off_i16 = (y - R.quantize_act_i16(x) @ W.T).abs().max()
        assert off_i16 > 10 * off_exact, (fmt, T, off_exact, off_i16)


def test_mxfp4_scales_outside_the_exponent_range_fall_back_per_block():
    """A group of 16 rows whose e8m0 scales would take a weight out of bf16's normal range (here e = 1: 2^-126 x
    0.5, below it) is scaled per block in fp32 instead of in the weights' exponents; the other groups keep theirs.
    Wrongly folded, row 3 (e = 1 throughout) would be flushed to zero (the tile unit takes denormals as 0)."""
    K = 512
    w = _weights(48, K, "mxfp4_x16", 32, 7)
    s = w.scale.clone()
    flat = s.view(-1)  # X16 order: 16 bytes (the rows) a block, a group's blocks together
    nb = K // 32
    flat[torch.arange(nb) * 16 + 3] = 1  # group 0: every block of row 3
    w = dataclasses.replace(w, scale=s)
    for T in (16, 33):
        x = torch.randn(T, K, generator=torch.Generator().manual_seed(T)).bfloat16()
        y = fk.linear(x, w)
        _check(y, x, w, T)
        assert (y[:, 3] != 0).all()


@pytest.mark.parametrize(
    "f13,f2",
    [
        ("q4_k_x16", "q4_k_x16"),
        ("mxfp4_x16", "mxfp4_x16"),
        ("int4_sym_x16/f16", "int4_sym_x16/f16"),
        ("q4_k_x16", "q6_k"),  # Q4_K_M's layers with Q6_K down projections
        ("q4_k_x16", "q5_k"),  # W13 on the tiles, W2 (no tile kernel) in 16-bit blocks
    ],
)
def test_moe_prefill_within_the_fp32_bound(f13, f2):
    """A prefill-sized call (experts with up to ~20 routes, one with a single route, duplicates): both banks, or
    the one that has them, on the tiles; within the stage-by-stage bound."""
    H, I, E, T = 512, 256, 4, 40
    g = torch.Generator().manual_seed(3)
    x = torch.randn(T, H, generator=g).bfloat16()
    R_ = 2 * T
    tok = torch.randint(0, T, (R_,), generator=g, dtype=torch.int32)
    eid = torch.randint(0, E - 1, (R_,), generator=g, dtype=torch.int32)
    eid[5] = E - 1  # an expert with one route
    gate = torch.rand(R_, generator=g)

    w13, w2 = _weights(2 * I, H, f13, 32, 11, n=E), _weights(H, I, f2, 32, 12, n=E)
    assert fk.bf16_tiles(w13.fmt) and fk.bf16_tiles(w2.fmt) == (f2 != "q5_k")
    y = fk.moe_experts(x, tok, eid, gate, w13, w2)
    exact, bound = moe_bound(x, tok, eid, gate, w13, w2)
    over = (y.double() - exact).abs() - bound
    assert (over <= 0).all(), over.max().item()


def _run(code: str, amx: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FT_AMX": amx},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_switch_turns_them_off_and_refuses_other_values():
    res = _run("import ft_kernels as fk; assert not fk.bf16_tiles('q4_k_x16')", "0")
    assert res.returncode == 0, res.stderr[-2000:]
    res = _run("import ft_kernels as fk; fk.bf16_tiles('q4_k_x16')", "on")
    assert res.returncode != 0 and "FT_AMX=on is not 0 or 1" in res.stderr


def test_not_for_other_formats_or_groups():
    for fmt in ("bf16", "q4_k", "q5_k", "q6_k_x16", "int8_sym", "nvfp4"):
        assert not fk.bf16_tiles(fmt), fmt
    assert not fk.bf16_tiles("int4_sym_x16", 16)
