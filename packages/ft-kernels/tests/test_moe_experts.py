"""ft_kernels.moe_experts against its torch reference: every format, the ISAs this CPU has, ragged
shapes, T = 1..64, duplicate routes, both activations with biases, x in fp32 and bf16 (bf16 activations: h
rounded to bf16 before W2, checked through ``fp32_bounds.bf16_round``).

Error bound: kernel and reference multiply the same dequantised weights, so the only difference is
fp32 rounding; each output is checked against a float64 evaluation with the elementwise bound that
fp32 arithmetic implies (``fp32_bounds.moe_bound``: gamma(n) * sum |terms| per stage, any summation
order or ISA). The quantisers' own error against the float weights is bounded per format in
``test_quantisation_error``.
"""

import os
import subprocess
import sys
import threading

import ft_kernels as fk
import pytest
import torch
from fp32_bounds import moe_bound
from ft_kernels import kquants
from ft_kernels import reference as R

FORMATS = list(fk.FORMATS)
# (H, I): ragged against vector widths (8/16) and groups (32); 4-bit needs even sizes, mx/nvfp4 multiples of 32/16
# and the 4-bit table kernels' chunks of 128 columns (whole ones and a partial last one)
SHAPES = {
    "any": [(72, 40), (130, 34), (64, 96)],
    "mxfp4": [(96, 64), (64, 32), (288, 160)],
    **{
        k: [(96, 64), (64, 32), (288, 160)]
        for k in ("mxfp4_x16", "int4_sym_x16", "int8_sym_x16", "fp8_e4m3_x16")
    },  # rows in whole groups of 16
    "nvfp4": [(80, 48), (48, 16), (272, 144)],
    # K-quants: H and I in whole super-blocks of 256 columns
    **{k: [(256, 256), (512, 256), (256, 768)] for k in kquants.FORMATS},
}


def _shapes(fmt):
    return SHAPES.get(fmt, SHAPES["any"])


def _case(fmt, H, I, T, R, N=5, seed=0, bias=False, group=32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    tok = torch.randint(0, T, (R,), generator=g, dtype=torch.int32)
    eid = torch.randint(0, N, (R,), generator=g, dtype=torch.int32)
    gate = torch.rand(R, generator=g)
    b13 = torch.randn(N, 2 * I, generator=g) * 0.1 if bias else None
    b2 = torch.randn(N, H, generator=g) * 0.1 if bias else None
    w13 = fk.quantize(torch.randn(N, 2 * I, H, generator=g) * 0.1, fmt, group=group, bias=b13)
    w2 = fk.quantize(torch.randn(N, H, I, generator=g) * 0.1, fmt, group=group, bias=b2)
    return x, tok, eid, gate, w13, w2


def _check(y, args, **kw):
    """y = fk.moe_experts(*args, **kw) within the fp32 bound of the exact (float64) result."""
    exact, bound = moe_bound(*args, **kw)
    assert y.dtype == torch.float32 and y.shape == exact.shape
    over = (y.double() - exact).abs() - bound
    assert over.max().item() <= 0, (
        f"error exceeds the fp32 bound by {over.max().item():.3g} (max |y| {exact.abs().max():.3g})"
    )


@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 8, 9, 64])
@pytest.mark.parametrize("fmt", FORMATS)
def test_matches_reference(fmt, T, xdtype):
    for H, I in _shapes(fmt):
        x, *rest = _case(
            fmt, H, I, T, R=2 * T + 3, seed=H + I + T
        )  # more routes than tokens: duplicates
        args = (x.to(xdtype), *rest)
        _check(fk.moe_experts(*args), args)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("act", ["swiglu", "gptoss"])
def test_activations_biases_and_bf16_input(fmt, act):
    H, I = _shapes(fmt)[0]
    x, tok, eid, gate, w13, w2 = _case(fmt, H, I, 6, 20, bias=True, seed=7)
    for xin in (x, x.bfloat16()):
        _check(
            fk.moe_experts(xin, tok, eid, gate, w13, w2, act=act),
            (xin, tok, eid, gate, w13, w2),
            act=act,
        )


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "int4_sym", "int4_asym"])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_group_sizes(fmt, group):
    x, *rest = _case(
        fmt, 200, 136, 4, 10, group=group, seed=group
    )  # 200 % 64, 136 % 128: partial last groups
    for xin in (x, x.bfloat16()):
        _check(fk.moe_experts(xin, *rest), (xin, *rest))


def test_prefill_sized_input():
    """Hundreds of tokens per expert take the token-blocked path."""
    for fmt in ["bf16", "fp8_e4m3", "mxfp4", "int4_asym"]:
        args = _case(fmt, 128, 64, 300, 600, N=3, seed=3)
        _check(fk.moe_experts(*args), args)


def test_duplicate_routes_add_up():
    x, tok, eid, gate, w13, w2 = _case("bf16", 64, 32, 2, 1)
    y1 = fk.moe_experts(x, tok, eid, gate, w13, w2)
    y3 = fk.moe_experts(x, tok.repeat(3), eid.repeat(3), gate.repeat(3), w13, w2)
    torch.testing.assert_close(y3, 3 * y1, rtol=1e-5, atol=1e-6)


def test_no_routes_gives_zeros():
    x, _, _, _, w13, w2 = _case("bf16", 64, 32, 3, 1)
    e = torch.zeros(0, dtype=torch.int32)
    assert torch.equal(fk.moe_experts(x, e, e, torch.zeros(0), w13, w2), torch.zeros(3, 64))


BOUNDS = {
    "bf16": 5e-3,
    "f16": 1e-3,
    "fp8_e4m3": 0.07,
    "mxfp4": 0.2,
    "nvfp4": 0.2,
    "int4_sym": 0.1,
    "int4_asym": 0.1,
    "int8_sym": 4e-3,  # half a step, max|w| / 254, within a group's own max
    # plain min-max rule, not llama.cpp's scale search: half a step of (max - min) / 15 (31), both ends
    # rounded to 6-bit scales and mins (each within 1/126 of the block's largest); q6_k: absmax / 31
    "q4_k": 0.1,
    "q5_k": 0.05,
    "q6_k": 0.03,
    "q4_k_x16": 0.1,  # q4_k's bits
    "q5_k_x16": 0.05,  # q5_k's bits
    "q3_k_x16": 0.27,  # q3_k's bits
    "q6_k_x16": 0.03,  # q6_k's bits
    "mxfp4_x16": 0.2,  # mxfp4's bits
    "int4_sym_x16": 0.1,  # int4_sym's
    "int8_sym_x16": 4e-3,  # int8_sym's
    "fp8_e4m3_x16": 0.07,  # fp8_e4m3's
    # q3_k: a sub-block's largest |w| at code -4 (step |w| / 4), the other sign clamped at 3: up to a step, plus
    # the 6-bit scale's rounding (4 codes x half of max step / 31); q2_k: half a step of (max - min) / 3 (<= 2 max
    # / 6), plus 4-bit scale and min rounding (3 codes x max step / 30, max min / 30)
    "q3_k": 0.27,
    "q2_k": 0.45,
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantisation_error(fmt):
    cols = 256 if fmt in kquants.FORMATS else 96
    w = torch.randn(3, 64, cols, generator=torch.Generator().manual_seed(1))
    q = fk.quantize(w, fmt, group=32)
    err = (R.dequantize(q) - w).abs().max() / w.abs().max()
    assert err <= BOUNDS[fmt], f"{fmt}: {err:.3g}"


def test_threads_do_not_change_results_and_concurrent_callers_are_safe():
    """Every task of a job runs once whatever the pool's size (each participant takes a contiguous range of
    tasks, then helps the others): results equal bit for bit from 1 to 8 threads, with fewer tasks than
    threads too (the linear: 17 blocks of rows; at one bf16 token too, where the BF16 kernel streams differently
    on one thread and beside others)."""
    args = _case("fp8_e4m3", 512, 512, 8, 24, N=8, seed=5)  # > 1 MiB read: the pool runs it
    # decode (<= 4 routes an expert): on one thread whole experts a task, on more blocks of ~256 KiB (here 128 of
    # W13's 160 gate rows, 1024 of W2's 2048 rows)
    dec = _case("mxfp4_x16", 2048, 160, 2, 4, N=4, seed=6)
    dec = (dec[0].bfloat16(), *dec[1:])
    g = torch.Generator().manual_seed(9)
    w = fk.quantize(
        torch.randn(1, 4 * 136, 1024, generator=g), "bf16"
    )  # 1.06 MiB, blocks of 32 rows
    x = torch.randn(3, 1024, generator=g)
    # one bf16 token: the AVX-512 BF16 kernel prefetches only beside other threads
    xb = x[:1].bfloat16()
    n = fk.num_threads()
    try:
        fk.set_num_threads(1)
        y1, l1, d1 = fk.moe_experts(*args), fk.linear(x, w), fk.moe_experts(*dec)
        b1 = fk.linear(xb, w)
        for k in (2, 3, 5, 8, 24):
            fk.set_num_threads(k)
            assert fk.num_threads() == k
            assert torch.equal(fk.moe_experts(*args), y1), k
            assert torch.equal(fk.linear(x, w), l1), k
            assert torch.equal(fk.moe_experts(*dec), d1), k
            assert torch.equal(fk.linear(xb, w), b1), k
        _check(y1, args)
        _check(d1, dec)
    finally:
        fk.set_num_threads(n)
    results, errors = [None] * 4, []

    def work(i):
        try:
            for _ in range(10):
                results[i] = fk.moe_experts(*args)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        _check(r, args)


@pytest.mark.parametrize("isa", fk.available_isas())
def test_each_isa_matches_reference(isa):
    """Every format on each ISA this CPU has, forced by FT_CPU_ISA in a fresh process (read once per process)."""
    code = f"""
import sys, torch, ft_kernels as fk
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from fp32_bounds import moe_bound
assert fk.active_isa() == {isa!r}, fk.active_isa()
for fmt, (H, I) in [("bf16", (72, 40)), ("f16", (130, 34)), ("fp8_e4m3", (72, 40)), ("mxfp4", (96, 64)),
                    ("nvfp4", (80, 48)), ("int4_sym", (130, 34)), ("int4_asym", (72, 40)), ("int8_sym", (72, 40)),
                    ("q4_k", (256, 256)), ("q5_k", (512, 256)), ("q6_k", (256, 512)), ("q4_k_x16", (256, 256)),
                    ("q3_k", (256, 512)), ("q2_k", (512, 256)), ("q6_k_x16", (256, 512)), ("q5_k_x16", (512, 256)),
                    ("q3_k_x16", (256, 512)),
                    ("mxfp4_x16", (96, 64)), ("int4_sym_x16", (96, 64)),
                    ("int8_sym_x16", (96, 64)), ("fp8_e4m3_x16", (96, 64))]:
    for T in (1, 3, 8, 70):
        g = torch.Generator().manual_seed(T)
        x = torch.randn(T, H, generator=g); R_ = 2 * T + 1
        tok = torch.randint(0, T, (R_,), generator=g, dtype=torch.int32)
        eid = torch.randint(0, 4, (R_,), generator=g, dtype=torch.int32); gate = torch.rand(R_, generator=g)
        w13 = fk.quantize(torch.randn(4, 2 * I, H, generator=g) * .1, fmt, group=32, bias=torch.randn(4, 2 * I) * .1)
        w2 = fk.quantize(torch.randn(4, H, I, generator=g) * .1, fmt, group=32)
        for act, xin in (("swiglu", x), ("gptoss", x), ("swiglu", x.bfloat16())):
            y = fk.moe_experts(xin, tok, eid, gate, w13, w2, act=act)
            exact, bound = moe_bound(xin, tok, eid, gate, w13, w2, act=act)
            assert ((y.double() - exact).abs() <= bound).all(), (fmt, T, act, ((y.double() - exact).abs() - bound).max().item())
for H, I in ((72, 40), (520, 264)):  # bf16 x, one route an expert (AVX2's one-token bf16 kernel), tails of 8
    g = torch.Generator().manual_seed(H)
    x = torch.randn(2, H, generator=g).bfloat16()
    tok = torch.tensor([0, 0, 1], dtype=torch.int32); eid = torch.tensor([2, 0, 3], dtype=torch.int32)
    gate = torch.rand(3, generator=g)
    w13 = fk.quantize(torch.randn(4, 2 * I, H, generator=g) * .1, "bf16")
    w2 = fk.quantize(torch.randn(4, H, I, generator=g) * .1, "bf16")
    y = fk.moe_experts(x, tok, eid, gate, w13, w2)
    exact, bound = moe_bound(x, tok, eid, gate, w13, w2)
    assert ((y.double() - exact).abs() <= bound).all(), ("bf16 one route an expert", H)
"""
    # on AVX-512 BF16 the 4-bit formats' bf16-activation kernels run on AMD CPUs (Zen 5: not all): both ways on any CPU
    for nib in ("0", "1") if isa == "avx512bf16" else ("",):
        res = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "FT_CPU_ISA": isa, "FT_BF16_NIBBLES": nib},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr[-3000:]


_MIXED = """
import sys, torch, ft_kernels as fk
sys.path.insert(0, {here!r})
from fp32_bounds import moe_bound
from test_i16_activations import _quantize  # a K-quant X16 format: its base format's blocks, repacked
for f13, f2 in (("q4_k_x16", "q6_k_x16"), ("q6_k_x16", "q4_k_x16"), ("q5_k_x16", "q6_k"), ("mxfp4_x16", "bf16"),
                ("int4_sym_x16", "q6_k_x16")):
    for T in (1, 3, 8):
        g = torch.Generator().manual_seed(T)
        # heavy tails (many binades a block): 16-bit x differs from bf16 x well past the fp32 bound, so a bound of
        # the other path fails
        x = (torch.randn(T, 256, generator=g) * torch.exp(2 * torch.randn(T, 256, generator=g))).bfloat16()
        R_ = 2 * T + 1
        tok = torch.randint(0, T, (R_,), generator=g, dtype=torch.int32)
        eid = torch.randint(0, 4, (R_,), generator=g, dtype=torch.int32)
        gate = torch.rand(R_, generator=g)
        w13 = _quantize(torch.randn(4, 512, 256, generator=g) * .1, f13, 32)
        w2 = _quantize(torch.randn(4, 256, 256, generator=g) * .1, f2, 32)
        y = fk.moe_experts(x, tok, eid, gate, w13, w2)
        exact, bound = moe_bound(x, tok, eid, gate, w13, w2)
        assert ((y.double() - exact).abs() <= bound).all(), (f13, f2, T)
"""


# FT_BF16_NIBBLES picks kernels on AVX-512 BF16 only: elsewhere the CPU's default alone
@pytest.mark.parametrize("nib", ["", "0", "1"] if fk.active_isa() == "avx512bf16" else [""])
def test_banks_of_different_formats_take_their_own_paths(nib):
    """W13 and W2 in different formats (GGUF's Q4_K_M: Q4_K gate / up, Q6_K down) each take their own kernel: bf16 x
    as 16-bit blocks for a bank with a 16-bit kernel and no bf16 one, as it is for a bank with a bf16 kernel, widened
    to fp32 for one with neither; each within the bound of its own path (moe_bound). FT_BF16_NIBBLES on AVX-512 BF16:
    the CPU's default, all bf16 kernels, none."""
    res = subprocess.run(
        [sys.executable, "-c", _MIXED.format(here=os.path.dirname(os.path.abspath(__file__)))],
        env={**os.environ, "FT_BF16_NIBBLES": nib},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]


def test_forced_unknown_isa_raises():
    res = subprocess.run(
        [sys.executable, "-c", "import ft_kernels; ft_kernels.active_isa()"],
        env={**os.environ, "FT_CPU_ISA": "sse9"},
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0 and "FT_CPU_ISA=sse9 is not one of" in res.stderr


def test_bad_bf16_nibbles_switch_raises():
    code = "import torch, ft_kernels as fk; fk.linear(torch.randn(1, 64).bfloat16(), fk.quantize(torch.randn(1, 8, 64), 'mxfp4'))"
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FT_BF16_NIBBLES": "yes"},
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0 and "FT_BF16_NIBBLES=yes is not 0 or 1" in res.stderr


def _bank():
    return _case("fp8_e4m3", 64, 32, 3, 4, N=2)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda a: a.update(x=a["x"].double()), "x must be float32 or bfloat16"),
        (lambda a: a.update(eid=a["eid"].long()), "eid must be int32"),
        (lambda a: a.update(eid=torch.full_like(a["eid"], 9)), r"eid\[0\]=9 is outside \[0, N=2\)"),
        (lambda a: a.update(tok=torch.full_like(a["tok"], -1)), r"tok\[0\]=-1 is outside"),
        (lambda a: a.update(gate=a["gate"][:-1]), "gate must be float32"),
        (
            lambda a: a.update(w13=fk.ExpertWeights("fp8_e4m3", a["w13"].q, 64, None, group=32)),
            "w13_scale is required",
        ),
        (
            lambda a: a.update(
                w13=fk.ExpertWeights(
                    "fp8_e4m3", a["w13"].q, 64, a["w13"].scale[:, :, :1].contiguous(), group=32
                )
            ),
            "w13_scale must be float32",
        ),
        (
            lambda a: a.update(
                w2=fk.ExpertWeights(
                    "fp8_e4m3", a["w2"].q[:, :, :-2].contiguous(), 30, a["w2"].scale, group=32
                )
            ),
            "w2_q rows hold 30 bytes; fp8_e4m3 with 32 columns needs 32",
        ),
        (
            lambda a: a.update(
                w13=fk.ExpertWeights("int4_asym", a["w13"].q, 64, a["w13"].scale, group=32)
            ),
            "w13_q rows hold",
        ),
        (
            lambda a: a.update(w13=fk.ExpertWeights("fp4", a["w13"].q, 64)),
            "w13.fmt 'fp4' is not one of",
        ),
        (lambda a: a.update(act="relu"), "act must be one of"),
    ],
)
def test_bad_arguments_raise_naming_them(mutate, match):
    x, tok, eid, gate, w13, w2 = _bank()
    a = dict(x=x, tok=tok, eid=eid, gate=gate, w13=w13, w2=w2, act="swiglu")
    mutate(a)
    with pytest.raises(ValueError, match=match):
        fk.moe_experts(a["x"], a["tok"], a["eid"], a["gate"], a["w13"], a["w2"], act=a["act"])


def test_moe_swiglu_shorthand():
    x, tok, eid, gate, w13, w2 = _case("bf16", 64, 32, 3, 5)
    torch.testing.assert_close(
        fk.moe_swiglu(x, tok, eid, gate, w13.q, w2.q), fk.moe_experts(x, tok, eid, gate, w13, w2)
    )
    with pytest.raises(ValueError, match="bfloat16 banks"):
        fk.moe_swiglu(x, tok, eid, gate, w13.q.float(), w2.q)
