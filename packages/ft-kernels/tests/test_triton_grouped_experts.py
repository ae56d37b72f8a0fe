"""Triton grouped expert FFN over slots against the torch reference, run on the CPU by Triton's
interpreter (TRITON_INTERPRET=1, set before triton is imported, in a fresh process)."""

import os
import subprocess
import sys

CODE = r"""
import torch, ft_kernels as fk
from ft_kernels import reference as R
from ft_kernels.gpu.grouped_experts import grouped_experts
for fmt in ("bf16", "f16"):
    for H, I, T, Rn, act, bias in [(72, 40, 3, 7, "swiglu", False), (64, 96, 1, 4, "gptoss", True),
                                   (130, 34, 5, 12, "swiglu", True), (48, 32, 2, 0, "swiglu", False)]:
        g = torch.Generator().manual_seed(H + I)
        S = 5
        x = torch.randn(T, H, generator=g)
        tok = torch.randint(0, T, (Rn,), generator=g, dtype=torch.int32)
        slot = torch.randint(0, S, (Rn,), generator=g, dtype=torch.int32)  # duplicates: shared slots and tokens
        gate = torch.rand(Rn, generator=g)
        w13 = fk.quantize(torch.randn(S, 2 * I, H, generator=g) * .1, fmt, bias=torch.randn(S, 2 * I) * .1 if bias else None)
        w2 = fk.quantize(torch.randn(S, H, I, generator=g) * .1, fmt, bias=torch.randn(S, H) * .1 if bias else None)
        y = grouped_experts(x, tok, slot, gate, w13, w2, act=act)
        r = R.moe_experts(x, tok, slot, gate, w13, w2, act=act)
        err = (y - r).abs().max().item()
        assert err <= 2e-5 * max(r.abs().max().item(), 1e-6) + 1e-7, (fmt, H, I, T, act, err)
print("ok")
"""


def test_grouped_experts_matches_reference_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
