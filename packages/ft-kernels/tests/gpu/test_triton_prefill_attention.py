"""The Triton paged prefill attention (Triton's interpreter on the CPU, in a fresh process) against float64,
within the bound of its arithmetic (``fp32_bounds.prefill_attention_bound``: blocks of 32 keys, the weights
rounded to bf16 for the value sum; the fp32 kernel's exact products sit inside it).

Cases (test_prefill_attention's, which the CPU kernel of the same interface passes): G = N / K of 1, 4, 6 and
64 (rows of a program cut mid-token, or one token a program); widths not powers of two (40, 36, 48); a whole
prompt, and in one batch a chunk after earlier context, a decode token, a sequence with nothing new and a fresh
prompt; page sizes 16 and 5 in shuffled order; windows; sinks above and below the scores; fp32 and bf16 pools;
int32 page tables. A kernel whose queries sit one position early (a key short) fails the bound."""

import os
import subprocess
import sys

CODE = r"""
import sys, torch
sys.path.insert(0, TESTS)
from test_prefill_attention import SHAPES, BATCHES, make_case
from fp32_bounds import prefill_attention_bound
from ft_kernels.gpu.prefill_attention import prefill_attention

def check(N, K, D, Dv, S, q_lens, ctx, window, sinks_on, dtype, seed=0, int32=False):
    q, kp, vp, table, ql, cl = make_case(N, K, D, Dv, S, q_lens, ctx, seed)
    q, kp, vp = q.to(dtype), kp.to(dtype), vp.to(dtype)
    sinks = torch.randn(N, generator=torch.Generator().manual_seed(seed + 1)) * 4 if sinks_on else None
    pt = table.int() if int32 else table
    got = prefill_attention(q, kp, vp, pt, ql, cl, D**-0.5, window, sinks, max_q=max(q_lens))
    exact, bound = prefill_attention_bound(q, kp, vp, table, ql, cl, D**-0.5, window, sinks)
    err = (got.double() - exact).abs().amax(-1)
    assert got.dtype == torch.float32 and got.shape == exact.shape
    assert (err <= bound).all(), (N, K, D, Dv, S, q_lens, ctx, window, sinks_on, dtype,
                                  (err / bound).max().item())
    return q, kp, vp, table, ql, cl, exact, bound

cases = 0
for N, K, D, Dv in SHAPES:
    for q_lens, ctx in BATCHES:
        for S in (16, 5):
            for window, sinks_on, dtype in ((0, False, torch.bfloat16), (7, True, torch.float32),
                                            (100, False, torch.float32), (0, True, torch.bfloat16)):
                check(N, K, D, Dv, S, q_lens, ctx, window, sinks_on, dtype, int32=window == 7)
                cases += 1

# a kernel whose queries sit one position early (each misses its newest key) fails the bound
q, kp, vp, table, ql, cl, exact, bound = check(16, 4, 128, 128, 16, [37, 20], [300, 20], 0, False,
                                               torch.bfloat16)
short = prefill_attention(q, kp, vp, table, ql, cl - 1, 128**-0.5)
assert ((short.double() - exact).abs().amax(-1) > bound).any()

for bad, want in (
    (lambda: prefill_attention(q.float(), kp, vp, table, ql, cl, 1.0), "share bf16 or fp32"),
    (lambda: prefill_attention(q, kp, vp, table, ql[:1], cl, 1.0), "for 2 sequences"),
    (lambda: prefill_attention(q, kp, vp, table, ql, cl, 1.0, 0, torch.zeros(3)), "sinks must be fp32"),
):
    try:
        bad()
    except ValueError as e:
        assert want in str(e), e
    else:
        raise AssertionError(want)
print("ok", cases)
"""


def test_prefill_attention_under_interpreter():
    tests = os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))
    )  # the ft-kernels tests' helpers
    res = subprocess.run(
        [sys.executable, "-c", f"TESTS = {tests!r}\n" + CODE],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
