"""ft_kernels.decode_attention (one query per sequence over its paged KV) against its twin in float64.

Cases: fp32 and bf16 pools and queries; whole contexts and contexts split in spans merged at the end; G = N / K of 1, 2, 4, 6 (tiles of 4 plus a remainder), 8 and 16; head widths
with vector tails (36, 40); value width apart from key width; ragged contexts (1 key, partial pages, several
64-key blocks); page sizes 16 and 5; pages in shuffled order; windows; sinks above and below the scores. The
bound is elementwise from the arithmetic (fp32_bounds.decode_attention_bound); a dropped or extra key, a wrong
page or a misplaced sink moves outputs by ~max|v| / L, far above it. Each ISA this CPU has runs the same cases
in a fresh process (FT_CPU_ISA).
"""

import ft_kernels as fk
import pytest
import torch
from isa_run import run_all_in_isa
from fp32_bounds import decode_attention_bound

SHAPES = [
    (8, 2, 64, 64),
    (16, 4, 128, 128),
    (6, 6, 36, 36),
    (12, 2, 40, 40),
    (4, 1, 48, 32),
    (16, 2, 128, 128),
    (32, 2, 64, 96),
    (4, 4, 32, 64),
    (4, 2, 96, 32),
]  # N, K, D, Dv; with bf16 q and pools, G = N / K of 1, 2, 4, 8, 16 and widths in 32s take the bf16 dot product
# where the CPU has one (fk.decode_attention_bf16), the others the exact-product span


def make_case(N, K, D, Dv, dtype, S, ctx, seed):
    """Pools of P pages (shuffled page tables, padding entries point at valid pages), q, ctx_lens."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-c // S) for c in ctx]
    pmax, P = max(need), sum(need) + 3
    k_pool = torch.randn(P, S, K, D, generator=g).to(dtype)
    v_pool = torch.randn(P, S, K, Dv, generator=g).to(dtype)
    order = torch.randperm(P, generator=g)
    table = torch.zeros(len(ctx), pmax, dtype=torch.int64)
    used = 0
    for b, n in enumerate(need):
        table[b, :n] = order[used : used + n]
        table[b, n:] = order[-1]
        used += n
    q = (torch.randn(len(ctx), N, D, generator=g) * 2).to(dtype)
    return q, k_pool, v_pool, table, torch.tensor(ctx, dtype=torch.int64)


def check(N, K, D, Dv, dtype, S, ctx, window, sinks_on, seed=0, split_keys=0):
    q, kp, vp, table, ctx_t = make_case(N, K, D, Dv, dtype, S, ctx, seed)
    scale = D**-0.5
    sinks = (
        (torch.randn(N, generator=torch.Generator().manual_seed(seed + 1)) * 4)
        if sinks_on
        else None
    )
    got = fk.decode_attention(q, kp, vp, table, ctx_t, scale, window, sinks, split_keys=split_keys)
    spans = max(ctx) // (split_keys or max(32, 256 // K)) + 1
    bf16_weights = dtype == torch.bfloat16 and fk.decode_attention_bf16(N, K, D, Dv)
    exact, bound = decode_attention_bound(
        q, kp, vp, table, ctx_t, scale, window, sinks, spans=spans, bf16_weights=bf16_weights
    )
    err = (got.double() - exact).abs().amax(-1)
    assert (err <= bound).all(), (
        N,
        K,
        D,
        Dv,
        dtype,
        S,
        ctx,
        window,
        sinks_on,
        (err / bound).max().item(),
    )


def run_all():
    for N, K, D, Dv in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            for S, ctx in ((16, [1, 17, 300]), (5, [64, 3, 129])):
                for window, sinks_on in ((0, False), (7, True), (100, False), (0, True)):
                    check(N, K, D, Dv, dtype, S, ctx, window, sinks_on)
                    check(N, K, D, Dv, dtype, S, ctx, window, sinks_on, split_keys=20)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("S,ctx", [(16, [1, 17, 300]), (5, [64, 3, 129])])
@pytest.mark.parametrize("window,sinks_on", [(0, False), (7, True), (100, False), (0, True)])
@pytest.mark.parametrize("split_keys", [0, 20])
def test_matches_twin(shape, dtype, S, ctx, window, sinks_on, split_keys):
    """split_keys=20: contexts split in spans of >= 20 keys where the pool has room (merges on the path)."""
    check(*shape, dtype, S, ctx, window, sinks_on, split_keys=split_keys)


@pytest.mark.parametrize("K,split_keys", [(4, 0), (1, 0), (1, 100)])
def test_long_context_in_blocks(K, split_keys):
    """2000 keys: 32 blocks of the online softmax, every rescale on the path; with one KV head the context is
    split in spans across the pool's threads (default 256 / K keys a span at least, or 100)."""
    check(16, K, 128, 128, torch.bfloat16, 16, [2000], 0, False, seed=3, split_keys=split_keys)


def test_bound_catches_a_dropped_key():
    """The bound is tight enough to fail a kernel that ignores the newest key (the one decode just wrote)."""
    q, kp, vp, table, ctx = make_case(16, 4, 128, 128, torch.bfloat16, 16, [300], 0)
    bf16_weights = fk.decode_attention_bf16(16, 4, 128, 128)
    exact, bound = decode_attention_bound(
        q, kp, vp, table, ctx, 128**-0.5, bf16_weights=bf16_weights
    )
    short = fk.decode_attention(q, kp, vp, table, ctx - 1, 128**-0.5)
    assert ((short.double() - exact).abs().amax(-1) > bound).any()


@pytest.mark.parametrize("split_keys", [0, 100])
def test_non_finite_keys_reach_the_output(split_keys):
    """A NaN in one cached key makes its KV head's outputs NaN (the engine's one check a step then names the
    layer), and leaves the other heads finite."""
    q, kp, vp, table, ctx = make_case(8, 2, 64, 64, torch.bfloat16, 16, [300], 0)
    row = table[0, 3] * 16 + 5  # token 53
    kp.view(-1, 2, 64)[row, 1, 7] = float("nan")
    o = fk.decode_attention(q, kp, vp, table, ctx, 0.125, split_keys=split_keys)
    assert torch.isnan(o[0, 4:]).all() and torch.isfinite(o[0, :4]).all()


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda q, kp, vp, t, c: fk.decode_attention(q[:, :5], kp, vp, t, c, 1.0),
            "multiple of k_pool's KV heads",
        ),
        (
            lambda q, kp, vp, t, c: fk.decode_attention(q, kp, vp.float(), t, c, 1.0),
            "v_pool must be",
        ),
        (
            lambda q, kp, vp, t, c: fk.decode_attention(q, kp, vp, t.int(), c, 1.0),
            "page_table must be int64",
        ),
        (
            lambda q, kp, vp, t, c: fk.decode_attention(q, kp, vp, t, c + 1000, 1.0),
            r"ctx_lens\[0\] = 1017 is outside",
        ),
        (
            lambda q, kp, vp, t, c: fk.decode_attention(q, kp, vp, t + 100, c, 1.0),
            r"page_table\[0, 0\] = 1\d\d is outside",
        ),
        (
            lambda q, kp, vp, t, c: fk.decode_attention(q, kp, vp, t, c, 1.0, sinks=torch.zeros(3)),
            "sinks must be",
        ),
        (
            lambda q, kp, vp, t, c: fk.decode_attention(q, kp, vp, t, c, 1.0, split_keys=-1),
            "split_keys must be >= 0",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, match):
    q, kp, vp, table, ctx = make_case(8, 2, 64, 64, torch.bfloat16, 16, [17, 40], 0)
    with pytest.raises(ValueError, match=match):
        call(q, kp, vp, table, ctx)


@pytest.mark.parametrize("isa", fk.available_isas())
def test_each_isa(isa):
    run_all_in_isa("test_decode_attention", isa)
