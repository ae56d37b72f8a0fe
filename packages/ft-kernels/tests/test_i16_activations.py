"""16-bit activations: a bfloat16 engine's x against K-quant, INT4, MXFP4 and INT8 (their X16 layouts) weights on ISAs without a bf16
dot product (AVX2, AVX-512 without BF16), where x was widened to fp32 before (``cpu/q8.h``: Q16Act; twin
``reference.quantize_act_i16``).

The twin's own properties come from the arithmetic: per block of 32 columns the step is d = 2^(E - 14),
E = floor(log2 max|x|), so a bf16 value (8 significant bits) within 2^7 of its block's max is a whole number of
steps (exact), and any other is within d / 2 <= max|x| 2^-15 of x.
The kernels against the twin: their integer dots are exact, so ``ft_kernels.linear`` / ``moe_experts`` differ from
float64 over (W, quantised x) by the fp32 bound alone (``fp32_bounds.linear_bound`` / ``moe_bound``, which take
x as ``kernel_x`` gives it). Activations here are heavy-tailed (many binades in one block) so that the rounded
elements are many; a block holding 1024 rounds its other elements to 1/16, and the result must then lie far nearer the
twin's than the exact x's (the 16-bit path is the one tested). Each ISA runs in a fresh process (FT_CPU_ISA is read once per process)."""

import dataclasses
import os
import re
import subprocess
import sys

import ft_kernels as fk
import pytest
import torch
from ft_kernels import kquants
from ft_kernels import reference as R
from ft_kernels.formats import REPACKED, scales_f16

KQ = ["q4_k", "q5_k", "q6_k", "q3_k", "q2_k"]
# the rows-in-lanes kernels (x86_avx2_q4kx16.cpp, x86_avx2_int4x16.cpp, x86_avx2_mxfp4x16.cpp,
# x86_avx2_int8x16.cpp); "/f16": INT4 scales in f16 (as GGUF's Q4_0)
FMTS = KQ + [
    "int4_sym",
    "int4_asym",
    "q4_k_x16",
    "int4_sym_x16",
    "int4_sym_x16/f16",
    "mxfp4_x16",
    "int8_sym_x16",
    "int8_sym_x16/f16",
    # with AVX-VNNI (x86_avx2_q6kx16.cpp, _q4kx16.cpp, _q3kx16.cpp) or, but Q6_K_X16, AVX-512 VNNI
    # (x86_avx512vnni_x16i16.cpp); elsewhere fp32 products (the scalar twin)
    "q6_k_x16",
    "q5_k_x16",
    "q3_k_x16",
]
# AVX-512 BF16 with its nibble kernels off (FT_BF16_NIBBLES=0, the default on Intel): the 16-bit ones run there
ISAS = [i for i in ("avx2", "avx512", "avx512bf16") if i in fk.available_isas()]


def _quantize(w: torch.Tensor, fmt: str, group: int) -> fk.ExpertWeights:
    """``fk.quantize``; for a K-quant X16 format its base format's blocks, repacked (rows in 16s); for
    "<fmt>/f16" scales rounded to f16 and kept in it (``formats.scales_f16``)."""
    if fmt in kquants.X16:
        base, K = fmt.removesuffix("_x16"), w.shape[-1]
        return fk.ExpertWeights(fmt, kquants.to_x16(fk.quantize(w, base).q, K, base), K, group=256)
    out = fk.quantize(w, fmt.removesuffix("/f16"), group=group)
    if fmt.endswith("/f16"):
        out = dataclasses.replace(out, scale=scales_f16(out.scale.half().float()))
        assert out.scale.dtype == torch.float16
    return out


def _heavy(T: int, K: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(T, K, generator=g) * torch.exp(2 * torch.randn(T, K, generator=g))
    ).bfloat16()


def test_twin_is_exact_near_the_max_and_within_half_a_step_elsewhere():
    x = _heavy(64, 512, 0)
    x[3, :32] = 0  # an all-zero block
    x[5, 40] = 2.0**-130  # a subnormal
    x[6, 64:96] = torch.tensor(3.0e38).bfloat16()  # the largest magnitudes: no overflow of the step
    q = R.quantize_act_i16(x)
    xd = x.double().reshape(64, -1, 32)
    amax = xd.abs().amax(-1, keepdim=True)
    E = (torch.frexp(amax)[1] - 1).clamp(min=-100)
    d = torch.pow(2.0, (E - 14).double())
    codes = q.reshape(xd.shape) / d
    assert torch.equal(codes, codes.round()) and codes.abs().max() < 2**15
    err = (q.reshape(xd.shape) - xd).abs()
    assert (err <= d / 2).all() and (err <= amax * 2.0**-15).all()
    near = xd.abs() * 2**7 >= amax
    assert (err[near] == 0).all()
    assert (err > 0).any()  # heavy tails: some elements are rounded
    assert (q[3, :32] == 0).all() and q[5, 40] == 0


def test_twin_propagates_inf_and_nan_per_block():
    x = torch.randn(2, 64).bfloat16()
    x[0, 3], x[1, 40] = float("inf"), float("nan")
    q = R.quantize_act_i16(x)
    assert q[0, :32].isnan().all() and not q[0, 32:].isnan().any()
    assert q[1, 32:].isnan().all() and not q[1, :32].isnan().any()


_CODE = """
import sys, torch, ft_kernels as fk
sys.path.insert(0, {here!r})
from fp32_bounds import linear_bound, moe_bound
from ft_kernels import reference as R
from test_i16_activations import FMTS, _heavy, _quantize
assert fk.active_isa() == {isa!r}
on = {on}
vnni = {vnni}  # AVX-VNNI on: Q5_K_X16 and Q3_K_X16 have 16-bit kernels too, and in AVX2 code Q6_K_X16
zmm = {zmm}  # AVX-512 with VNNI: Q5_K_X16 and Q3_K_X16 have zmm 16-bit kernels
for fmt in FMTS:
    gr = 32  # INT4 takes 16-bit x in groups of 32 only (GGUF Q4_0)
    for N, K in ((37, 256), (21, 768), (9, 2048)):
        i16 = on and (
            fmt not in ("q6_k_x16", "q5_k_x16", "q3_k_x16")
            or vnni and (fmt != "q6_k_x16" or {isa!r} == "avx2")
            or zmm and fmt != "q6_k_x16"
        )
        assert fk.bf16_i16(fmt.removesuffix("/f16"), K, gr) == i16, fmt
        N = -(-N // 16) * 16 if "_x16" in fmt else N  # whole groups of 16 rows
        for T in (1, 2, 3, 4, 5, 9):
            g = torch.Generator().manual_seed(N + K + T)
            w = _quantize(torch.randn(1, N, K, generator=g) * 0.1, fmt, gr)
            x = _heavy(T, K, N + T)
            y = fk.linear(x, w)
            xin = R.quantize_act_i16(x) if i16 else x
            exact, bound = linear_bound(xin, w, split_terms=True, q3k_offset=True)
            assert ((y.double() - exact).abs() <= bound).all(), (fmt, N, K, T)
            if i16:  # one 1024 a block: the others' steps are 1/16; the result is the twin's, not the exact x's
                xc = torch.randn(T, K, generator=g).bfloat16()
                xc[:, ::32] = 1024
                W = R.dequantize(w)[0].double()
                yc = fk.linear(xc, w).double()
                off_exact = (yc - xc.double() @ W.T).abs().max()
                off_twin = (yc - R.quantize_act_i16(xc) @ W.T).abs().max()
                assert off_exact > 10 * off_twin, (fmt, N, K, T, off_exact, off_twin)
            if i16 and fmt == "q3_k_x16" and T == 9 and not zmm:  # up to 4 tokens its bytes-widened kernel: the same bits
                assert torch.equal(fk.linear(x[:4], w), y[:4]) and torch.equal(fk.linear(x[:1], w), y[:1])
            x[0, 7] = float("nan")
            y = fk.linear(x, w)
            assert y[0].isnan().all() and not y[1:].isnan().any(), (fmt, T)
    H, I = 512, 256
    for T in (1, 3, 8):
        g = torch.Generator().manual_seed(T)
        x = _heavy(T, H, T)
        R_ = 2 * T + 1
        tok = torch.randint(0, T, (R_,), generator=g, dtype=torch.int32)
        eid = torch.randint(0, 4, (R_,), generator=g, dtype=torch.int32)
        gate = torch.rand(R_, generator=g)
        w13 = _quantize(torch.randn(4, 2 * I, H, generator=g) * 0.1, fmt, gr)
        w2 = _quantize(torch.randn(4, H, I, generator=g) * 0.1, fmt, gr)
        y = fk.moe_experts(x, tok, eid, gate, w13, w2)
        exact, bound = moe_bound(x, tok, eid, gate, w13, w2)
        assert ((y.double() - exact).abs() <= bound).all(), (fmt, T, ((y.double() - exact).abs() - bound).max().item())
"""


# AVX2 with AVX-VNNI (Intel desktops): its `vpdpwssd` build of the AVX2 kernels by default, the AVX2 one under
# FT_AVX_VNNI=0 (as a Zen 2/3 machine runs)
_CPUINFO = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""  # noqa: SIM115
_AVX_VNNI = " avx_vnni" in _CPUINFO
_AVX512_VNNI = " avx512_vnni" in _CPUINFO
_ZEN5 = (
    "AuthenticAMD" in _CPUINFO and re.search(r"^cpu family\s*:\s*26$", _CPUINFO, re.M) is not None
)
RUNS = [(i, "") for i in ISAS] + ([("avx2", "0")] if _AVX_VNNI and "avx2" in ISAS else [])


@pytest.mark.parametrize("on", ["1", "0"])
@pytest.mark.parametrize(
    ("isa", "vnni"), RUNS, ids=[f"{i}{'-novnni' if v else ''}" for i, v in RUNS]
)
def test_kernels_match_the_twin(isa, vnni, on):
    """Each K-quant format, INT4 (groups of 32), MXFP4_X16 and INT8_SYM_X16, T = 1..9, K up to 2048: linear within the fp32 bound of (W, the twin's x) and not
    within it of the exact x; a NaN in x makes that token's outputs NaN and no other's; the MoE call
    (x and the activation h in 16 bits). FT_BF16_I16=0: exact fp32 products instead. Where the CPU has AVX-VNNI,
    AVX2 both with it (tiles of 8 tokens) and without."""
    code = _CODE.format(
        here=os.path.dirname(os.path.abspath(__file__)),
        isa=isa,
        on=on == "1",
        vnni=_AVX_VNNI and vnni != "0",
        zmm=_AVX512_VNNI and isa.startswith("avx512"),
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={
            **os.environ,
            "FT_CPU_ISA": isa,
            "FT_BF16_I16": on,
            "FT_BF16_NIBBLES": "0",
            "FT_AVX_VNNI": vnni,
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]


def test_not_where_bf16_kernels_run_or_for_other_formats():
    """On AVX-512 BF16 a K-quant's bf16 x meets its weights in either the bf16 kernel (AMD) or the 16-bit one
    (Intel, FT_BF16_NIBBLES=0; on Zen 5 Q4_K_X16, Q3_K_X16 and INT8_SYM_X16), never both; formats without a 16-bit
    kernel, and INT4 groups or columns not in 32s, widen to fp32."""
    if fk.active_isa() == "avx512bf16":
        assert all(
            fk.bf16_i16(f, 256) != fk.bf16_simd(f)
            for f in KQ + ["q4_k_x16", "int4_sym_x16", "mxfp4_x16"]
        )
        if _ZEN5 and os.environ.get("FT_BF16_NIBBLES", "") == "":
            assert [f for f in REPACKED if fk.bf16_i16(f, 256)] == [
                "q4_k_x16",
                "q3_k_x16",
                "int8_sym_x16",
            ]
    for fmt, cols, group in (
        ("bf16", 256, 32),
        ("fp8_e4m3", 256, 32),
        ("int8_sym", 256, 32),
        ("mxfp4", 256, 32),
        ("nvfp4", 256, 32),
        ("int4_sym", 256, 128),
        ("int4_asym", 80, 16),
    ):
        assert not fk.bf16_i16(fmt, cols, group), fmt
    # the X16 K-quants with a 16-bit kernel only where AVX-VNNI is on (Q6_K_X16: in AVX2 code only) or, but Q6_K_X16,
    # on AVX-512 with VNNI
    vnni = _AVX_VNNI and os.environ.get("FT_AVX_VNNI") != "0" and fk.active_isa() != "scalar"
    zmm = _AVX512_VNNI and fk.active_isa().startswith("avx512")
    for fmt in ("q6_k_x16", "q5_k_x16", "q3_k_x16"):
        i16 = (
            vnni and (fmt != "q6_k_x16" or fk.active_isa() == "avx2") or zmm and fmt != "q6_k_x16"
        ) and not (fk.bf16_simd(fmt))
        assert fk.bf16_i16(fmt, 256, 32) == i16, fmt


@pytest.mark.parametrize(
    ("isa", "var", "fmt"),
    [("scalar", "FT_BF16_I16", "q4_k"), ("avx2", "FT_AVX_VNNI", "mxfp4_x16")],
    ids=["bf16_i16", "avx_vnni"],
)
def test_bad_switch_value_is_refused(isa, var, fmt):
    """FT_BF16_I16 is read wherever bf16 x lacks a bf16 kernel (scalar included), so any CPU checks it; FT_AVX_VNNI
    where an AVX2 16-bit kernel is picked. A value other than 0 or 1 is an error naming the variable."""
    if isa not in fk.available_isas():
        pytest.skip(f"no {isa} on this CPU")
    code = (
        "import ft_kernels as fk, torch; "
        f"fk.linear(torch.ones(1, 256).bfloat16(), fk.quantize(torch.ones(1, 16, 256), {fmt!r}))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FT_CPU_ISA": isa, var: "yes"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and f"{var}=yes is not 0 or 1" in res.stderr
