"""ft_kernels.prefill_attention (packed new tokens over their paged bf16 KV, causal) against its twin in float64.

Cases: G = N / K of 1, 4, 6 (lane groups of 16 rows cut mid-query) and 64 (one query a task); key widths with
a tail past 16 column pairs (40, 96) and value widths past 16 columns (36, 48); a whole prompt, a chunk after
earlier context, a decode token and an empty sequence in one batch; contexts of one key, partial pages and
many 32-key blocks; page sizes 16 and 5; pages in shuffled order; windows; sinks above and below the scores.
The bound is elementwise from the arithmetic (fp32_bounds.prefill_attention_bound: the weights' bf16 rounding
included); a dropped or extra key, a wrong page or a misplaced sink moves outputs by ~max|v| / L, far above it.
Each ISA this CPU has runs the same cases in a fresh process (FT_CPU_ISA): the AVX-512 BF16 build where the
CPU has it, the scalar ground truth on every machine.
"""

import os
import subprocess
import sys

import ft_kernels as fk
import pytest
import torch
from isa_run import run_all_in_isa
from fp32_bounds import prefill_attention_bound

SHAPES = [
    (16, 4, 128, 128),
    (8, 8, 64, 64),
    (12, 2, 96, 48),
    (64, 1, 40, 36),
]  # N, K, D, Dv
BATCHES = [
    ([70], [70]),  # one fresh prompt
    (
        [37, 1, 0, 20],
        [300, 17, 5, 20],
    ),  # a chunk after context, a decode token, nothing new, a fresh prompt
]


def make_case(N, K, D, Dv, S, q_lens, ctx, seed):
    """Pools of P pages (shuffled page tables, padding entries point at valid pages), q [T, N, D]."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-c // S) for c in ctx]
    pmax, P = max(need), sum(need) + 3
    k_pool = torch.randn(P, S, K, D, generator=g).bfloat16()
    v_pool = torch.randn(P, S, K, Dv, generator=g).bfloat16()
    order = torch.randperm(P, generator=g)
    table = torch.zeros(len(ctx), pmax, dtype=torch.int64)
    used = 0
    for b, n in enumerate(need):
        table[b, :n] = order[used : used + n]
        table[b, n:] = order[-1]
        used += n
    q = (torch.randn(sum(q_lens), N, D, generator=g) * 2).bfloat16()
    return q, k_pool, v_pool, table, torch.tensor(q_lens), torch.tensor(ctx)


def check(N, K, D, Dv, S, q_lens, ctx, window, sinks_on, seed=0):
    q, kp, vp, table, ql, cl = make_case(N, K, D, Dv, S, q_lens, ctx, seed)
    scale = D**-0.5
    sinks = (
        torch.randn(N, generator=torch.Generator().manual_seed(seed + 1)) * 4 if sinks_on else None
    )
    got = fk.prefill_attention(q, kp, vp, table, ql, cl, scale, window, sinks)
    exact, bound = prefill_attention_bound(q, kp, vp, table, ql, cl, scale, window, sinks)
    err = (got.double() - exact).abs().amax(-1)
    assert (err <= bound).all(), (
        N,
        K,
        D,
        Dv,
        S,
        q_lens,
        ctx,
        window,
        sinks_on,
        (err / bound).max().item(),
    )


def run_all():
    for shape in SHAPES:
        for S in (16, 5):
            for q_lens, ctx in BATCHES:
                for window, sinks_on in ((0, False), (7, True), (0, True)):
                    check(*shape, S, q_lens, ctx, window, sinks_on)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("S", [16, 5])
@pytest.mark.parametrize("q_lens,ctx", BATCHES)
@pytest.mark.parametrize("window,sinks_on", [(0, False), (7, True), (40, False), (0, True)])
def test_matches_twin(shape, S, q_lens, ctx, window, sinks_on):
    check(*shape, S, q_lens, ctx, window, sinks_on)


@pytest.mark.parametrize("K", [4, 1])
def test_long_context_in_blocks(K):
    """A 300-token chunk after 1700 keys: ~60 blocks of the online softmax, every rescale on the path, tasks of
    several lane groups sharing each block's keys."""
    check(16, K, 128, 128, 16, [300], [2000], 0, False, seed=3)


def test_bound_catches_a_dropped_key():
    """The bound is tight enough to fail a kernel that misses the newest key of each query (its own): with
    contexts of 5-24 keys that moves most rows past it (the weights' bf16 rounding allows ~2^-8 max|v|)."""
    q, kp, vp, table, ql, cl = make_case(16, 4, 128, 128, 16, [20], [24], 0)
    exact, bound = prefill_attention_bound(q, kp, vp, table, ql, cl, 128**-0.5)
    # The same queries one position earlier each: every query loses its own key.
    short = fk.prefill_attention(q, kp, vp, table, ql, cl - 1, 128**-0.5)
    assert ((short.double() - exact).abs().amax(-1) > bound).float().mean() > 0.5


def test_matches_scalar_ground_truth():
    """The SIMD build and the scalar one agree to fp32 summation order (same blocks, same bf16 weights)."""
    code = """
import torch, ft_kernels as fk, sys
sys.path.insert(0, {d!r})
from test_prefill_attention import make_case
q, kp, vp, t, ql, cl = make_case(16, 4, 128, 128, 16, [37, 1, 20], [300, 17, 20], 5)
torch.save(fk.prefill_attention(q, kp, vp, t, ql, cl, 0.1, 0, torch.ones(16)), sys.argv[1])
"""
    d = os.path.dirname(os.path.abspath(__file__))
    outs = {}
    for isa in {"scalar", fk.active_isa()}:
        path = os.path.join(
            os.environ.get("TMPDIR", "/tmp"), f"ft_prefill_attn_{os.getpid()}_{isa}.pt"
        )
        res = subprocess.run(
            [sys.executable, "-c", code.format(d=d), path],
            env={**os.environ, "FT_CPU_ISA": isa},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        outs[isa] = torch.load(path)
        os.unlink(path)
    a, b = outs["scalar"], outs[fk.active_isa()]
    # Each weight can round to a neighbouring bf16 value when the two exps differ in their last bits: 2^-8 of
    # max|v| per key at most, far less in sum; the outputs differ in a few low bits.
    assert (a - b).abs().max() <= 2**-8 * 4


def test_non_finite_keys_reach_the_output():
    """A NaN in one cached key makes the outputs that see it NaN for its KV head's queries; earlier queries and
    other heads stay finite."""
    q, kp, vp, table, ql, cl = make_case(8, 2, 64, 64, 16, [40], [300], 0)
    row = table[0, 17] * 16 + 5  # token 277 (queries 260 .. 299)
    kp.view(-1, 2, 64)[row, 1, 7] = float("nan")
    o = fk.prefill_attention(q, kp, vp, table, ql, cl, 0.125)
    assert (
        torch.isnan(o[17:, 4:]).all()
        and torch.isfinite(o[:17]).all()
        and torch.isfinite(o[:, :4]).all()
    )


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q[:, :5], kp, vp, t, ql, cl, 1.0),
            "multiple of k_pool's KV heads",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q.float(), kp, vp, t, ql, cl, 1.0),
            "q must be bfloat16",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q, kp, vp.float(), t, ql, cl, 1.0),
            "v_pool must be",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q, kp, vp, t.int(), ql, cl, 1.0),
            "page_table must be int64",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q, kp, vp, t, ql, cl + 1000, 1.0),
            r"ctx_lens\[0\] = 1017 is outside",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q, kp, vp, t, ql + 30, cl, 1.0),
            r"q_lens\[0\] = 37 is outside",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q, kp, vp, t, ql - 1, cl, 1.0),
            "q_lens sum to 13, q has T = 15",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q, kp, vp, t + 100, ql, cl, 1.0),
            r"page_table\[0, 0\] = 1\d\d is outside",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(
                q, kp, vp, t, ql, cl, 1.0, sinks=torch.zeros(3)
            ),
            "sinks must be",
        ),
        (
            lambda q, kp, vp, t, ql, cl: fk.prefill_attention(q, kp, vp, t, ql, cl, 1.0, window=-1),
            "window must be >= 0",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, match):
    q, kp, vp, table, ql, cl = make_case(8, 2, 64, 64, 16, [7, 8], [17, 40], 0)
    with pytest.raises(ValueError, match=match):
        call(q, kp, vp, table, ql, cl)


@pytest.mark.parametrize("isa", fk.available_isas())
def test_each_isa(isa):
    run_all_in_isa("test_prefill_attention", isa, timeout=900)
