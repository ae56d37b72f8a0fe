"""Triton grouped expert FFN over slots against float64, within the bound of its fp32 arithmetic
(``fp32_bounds.moe_bound``; x in bf16: h rounded to bf16), and routes with slot -1 skipped, run on the
CPU by Triton's interpreter
(TRITON_INTERPRET=1, set before triton is imported, in a fresh process)."""

import os
import subprocess
import sys

CODE = r"""
import sys, torch, ft_kernels as fk
sys.path.insert(0, TESTS)
from fp32_bounds import moe_bound
from ft_kernels.gpu.grouped_experts import grouped_experts
for fmt, xdtype in (("bf16", torch.float32), ("f16", torch.float32), ("bf16", torch.bfloat16)):
    for H, I, T, Rn, act, bias in [(72, 40, 3, 7, "swiglu", False), (64, 96, 1, 4, "gptoss", True),
                                   (130, 34, 5, 12, "swiglu", True), (48, 32, 2, 0, "swiglu", False)]:
        g = torch.Generator().manual_seed(H + I)
        S = 5
        x = torch.randn(T, H, generator=g).to(xdtype)
        tok = torch.randint(0, T, (Rn,), generator=g, dtype=torch.int32)
        slot = torch.randint(0, S, (Rn,), generator=g, dtype=torch.int32)  # duplicates: shared slots and tokens
        gate = torch.rand(Rn, generator=g)
        w13 = fk.quantize(torch.randn(S, 2 * I, H, generator=g) * .1, fmt, bias=torch.randn(S, 2 * I) * .1 if bias else None)
        w2 = fk.quantize(torch.randn(S, H, I, generator=g) * .1, fmt, bias=torch.randn(S, H) * .1 if bias else None)
        y = grouped_experts(x, tok, slot, gate, w13, w2, act=act)
        exact, bound = moe_bound(x, tok, slot, gate, w13, w2, act=act)  # the fp32 arithmetic's own bound
        over = ((y.double() - exact).abs() - bound).max().item() if Rn else y.abs().max().item()
        assert over <= 0, (fmt, xdtype, H, I, T, act, over)
        if Rn:  # routes served on the CPU come as slot -1: skipped, the rest's sum unchanged bit for bit
            cpu = torch.arange(Rn) % 3 == 1
            y2 = grouped_experts(x, tok, torch.where(cpu, -1, slot), gate, w13, w2, act=act)
            keep = ~cpu
            y3 = grouped_experts(x, tok[keep], slot[keep], gate[keep], w13, w2, act=act)
            assert torch.equal(y2, y3), (fmt, xdtype, H, I, T, act)
print("ok")
"""


def test_grouped_experts_matches_reference_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = (
        f"TESTS = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r}\n" + CODE
    )  # fp32_bounds
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
