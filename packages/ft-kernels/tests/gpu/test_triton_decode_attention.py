"""The Triton paged decode attention (Triton's interpreter on the CPU, in a fresh process) against float64,
within the bound of its fp32 arithmetic (``fp32_bounds.decode_attention_bound``: blocks of 32 keys, each split
a partial block and a merge; bf16 pools with the weights rounded to bf16).

Cases: fp32 and bf16; G = N / K of 1, 4, 6 (heads padded to a power of two) and 16; widths not powers of two
(36, 40) and a value width apart from the key width; ragged contexts (1 key, partial pages, several blocks);
page sizes 16 and 5 in shuffled order; windows; sinks above and below the scores; the default splits and
forced ones (3, 7: some splits empty), int32 page tables; 2000 keys. A sequence with no key (a padded row of
a batch bucket) gives zeros; a kernel that drops the newest key fails the bound."""

import os
import subprocess
import sys

CODE = r"""
import sys, torch
sys.path.insert(0, TESTS)
from test_decode_attention import make_case
from fp32_bounds import decode_attention_bound
from ft_kernels.gpu.decode_attention import decode_attention, splits_for, BN

def check(N, K, D, Dv, dtype, S, ctx, window, sinks_on, splits, seed=0, int32=False):
    q, kp, vp, table, ctx_t = make_case(N, K, D, Dv, dtype, S, ctx, seed)
    sinks = torch.randn(N, generator=torch.Generator().manual_seed(seed + 1)) * 4 if sinks_on else None
    pt = table.int() if int32 else table
    got = decode_attention(q, kp, vp, pt, ctx_t, D**-0.5, window, sinks, splits)
    NS = splits or splits_for(table.shape[1] * S)
    exact, bound = decode_attention_bound(q, kp, vp, table, ctx_t, D**-0.5, window, sinks, block=BN,
                                          spans=NS, bf16_weights=dtype == torch.bfloat16)
    err = (got.double() - exact).abs().amax(-1)
    assert got.dtype == torch.float32 and (err <= bound).all(), (N, K, D, Dv, dtype, S, ctx, window, sinks_on,
                                                                  splits, (err / bound).max().item())
    return q, kp, vp, table, ctx_t, exact, bound

cases = 0
for N, K, D, Dv in ((16, 4, 128, 128), (6, 6, 36, 36), (12, 2, 40, 40), (4, 1, 48, 32), (32, 2, 64, 96)):
    for dtype in (torch.float32, torch.bfloat16):
        for S, ctx in ((16, [1, 17, 300]), (5, [64, 3, 129])):
            for window, sinks_on, splits in ((0, False, None), (7, True, 3), (100, False, 7), (0, True, None)):
                check(N, K, D, Dv, dtype, S, ctx, window, sinks_on, splits, int32=window == 7)
                cases += 1
for K in (1, 4):  # 2000 keys: 63 blocks, in the default splits (8 from 2000 keys) or in one
    for splits in (None, 1):
        check(16, K, 128, 128, torch.bfloat16, 16, [2000], 0, False, splits, seed=3)
        cases += 1

# a padded row of a batch bucket (no key, no sink): zeros, its neighbours as they were
q, kp, vp, table, ctx_t = make_case(8, 2, 64, 64, torch.bfloat16, 16, [40, 9], 0)
ctx0 = ctx_t.clone(); ctx0[1] = 0
got = decode_attention(q, kp, vp, table, ctx0, 0.125)
assert torch.equal(got[1], torch.zeros_like(got[1])), got[1].abs().max()
assert torch.equal(got[0], decode_attention(q, kp, vp, table, ctx_t, 0.125)[0])

# the bound is tight enough to fail a kernel that ignores the newest key (the one decode just wrote)
q, kp, vp, table, ctx_t = make_case(16, 4, 128, 128, torch.bfloat16, 16, [300], 0)
exact, bound = decode_attention_bound(q, kp, vp, table, ctx_t, 128**-0.5, block=BN, spans=2, bf16_weights=True)
short = decode_attention(q, kp, vp, table, ctx_t - 1, 128**-0.5)
assert ((short.double() - exact).abs().amax(-1) > bound).any()

for bad, want in (
    (lambda: decode_attention(q.float(), kp, vp, table, ctx_t, 1.0), "must share"),
    (lambda: decode_attention(q, kp, vp[..., :2, :], table, ctx_t, 1.0), "do not match"),
    (lambda: decode_attention(q, kp, vp, table, ctx_t[:0], 1.0), "ctx_lens"),
    (lambda: decode_attention(q, kp, vp, table, ctx_t, 1.0, sinks=torch.zeros(3)), "sinks"),
):
    try:
        bad()
        raise SystemExit(f"not refused: {want}")
    except ValueError as e:
        assert want in str(e), (want, str(e))
print("ok", cases)
"""


def test_decode_attention_matches_twin_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fp32_bounds, make_case
    res = subprocess.run(
        [sys.executable, "-c", f"TESTS = {tests!r}\n" + CODE],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
