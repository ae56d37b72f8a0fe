"""ft_kernels.moe_swiglu against its torch reference over ISAs, shapes, token counts, duplicate routes."""

import os
import subprocess
import sys

import pytest
import torch

import ft_kernels
from ft_kernels import reference


def _isas():
    have = ["scalar"]
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if " avx2" in flags and " fma" in flags:
        have.append("avx2")
    if " avx512f" in flags and " avx512bw" in flags and " avx512vl" in flags:
        have.append("avx512")
    return have


def _case(T, H, I, N, R, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    tok = torch.randint(0, T, (R,), generator=g, dtype=torch.int32)
    eid = torch.randint(0, N, (R,), generator=g, dtype=torch.int32)
    gate = torch.rand(R, generator=g)
    w13 = (torch.randn(N, 2 * I, H, generator=g) * 0.1).bfloat16()
    w2 = (torch.randn(N, H, I, generator=g) * 0.1).bfloat16()
    return x, tok, eid, gate, w13, w2


SHAPES = [(64, 32), (72, 40), (17, 9), (256, 128), (33, 130)]  # (H, I): multiples and not of 8/16


@pytest.mark.parametrize("H,I", SHAPES)
@pytest.mark.parametrize("T", [1, 2, 3, 5, 8, 64])
def test_matches_reference(H, I, T):
    R = T * 2 + 3  # more routes than tokens: duplicates (same token, same expert) happen
    args = _case(T, H, I, N=6, R=R, seed=H * 1000 + I * 10 + T)
    y = ft_kernels.moe_swiglu(*args)
    ref = reference.moe_swiglu(*args)
    assert y.dtype == torch.float32 and y.shape == (T, H)
    # fp32 accumulation in a different order: relative error bound 1e-5 of the output scale
    assert (y - ref).abs().max() <= 1e-5 * ref.abs().max() + 1e-6


def test_duplicate_routes_add_up():
    x, tok, eid, gate, w13, w2 = _case(2, 64, 32, 3, 1, 0)
    tok2, eid2, gate2 = tok.repeat(3), eid.repeat(3), gate.repeat(3)
    y1 = ft_kernels.moe_swiglu(x, tok, eid, gate, w13, w2)
    y3 = ft_kernels.moe_swiglu(x, tok2, eid2, gate2, w13, w2)
    torch.testing.assert_close(y3, 3 * y1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("isa", _isas())
def test_each_isa_matches_reference(isa):
    """Each instruction set the CPU has, forced by FT_CPU_ISA in a fresh process (chosen once per process)."""
    code = (
        "import torch, ft_kernels; from ft_kernels import reference;"
        "g=torch.Generator().manual_seed(1); T,H,I,N,R=7,97,45,5,20;"
        "x=torch.randn(T,H,generator=g); tok=torch.randint(0,T,(R,),generator=g,dtype=torch.int32);"
        "eid=torch.randint(0,N,(R,),generator=g,dtype=torch.int32); gt=torch.rand(R,generator=g);"
        "w13=(torch.randn(N,2*I,H,generator=g)*.1).bfloat16(); w2=(torch.randn(N,H,I,generator=g)*.1).bfloat16();"
        "y=ft_kernels.moe_swiglu(x,tok,eid,gt,w13,w2); r=reference.moe_swiglu(x,tok,eid,gt,w13,w2);"
        "assert ft_kernels.active_isa()==%r, ft_kernels.active_isa();"
        "assert (y-r).abs().max() <= 1e-5*r.abs().max(), (y-r).abs().max()" % isa
    )
    env = {**os.environ, "FT_CPU_ISA": isa}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda a: {**a, "x": a["x"].double()}, "x must be float32"),
        (lambda a: {**a, "eid": a["eid"].long()}, "eid must be int32"),
        (lambda a: {**a, "eid": torch.full_like(a["eid"], 99)}, r"eid\[0\]=99 is outside"),
        (lambda a: {**a, "tok": torch.full_like(a["tok"], -1)}, r"tok\[0\]=-1 is outside"),
        (lambda a: {**a, "w13": a["w13"].float()}, "w13 must be bfloat16"),
        (lambda a: {**a, "w2": a["w2"][:, :, :-1].contiguous()}, "w2 must be bfloat16"),
        (lambda a: {**a, "gate": a["gate"][:-1]}, "gate must be float32"),
    ],
)
def test_bad_arguments_raise(bad, match):
    x, tok, eid, gate, w13, w2 = _case(3, 32, 16, 2, 4, 0)
    a = bad(dict(x=x, tok=tok, eid=eid, gate=gate, w13=w13, w2=w2))
    with pytest.raises(ValueError, match=match):
        ft_kernels.moe_swiglu(a["x"], a["tok"], a["eid"], a["gate"], a["w13"], a["w2"])


def test_forced_unknown_isa_raises():
    code = "import ft_kernels; ft_kernels.active_isa()"
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, "FT_CPU_ISA": "sse9"}, capture_output=True, text=True)
    assert res.returncode != 0 and "FT_CPU_ISA=sse9 is not one of" in res.stderr
