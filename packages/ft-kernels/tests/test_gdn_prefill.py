"""ft_kernels.gdn_prefill (the gated delta rule over one sequence's prefill tokens, token by token) against its twin
ft_kernels.reference.gdn_prefill (torch, float32, the same rule as ft_core's recurrent_gated_delta_rule).

Bound, from the arithmetic: max |kernel - twin| <= 2 * 4 * gamma(L + Dk + Dv) * max |twin| (a token reaches an
output through at most L state updates and Dk- and Dv-long dot products, each rounded; 4 rounded stages a token;
both err), the bound ft-core's chunked-against-recurrent test uses. The rule runs token by token, so a prompt
split anywhere (at checkpoints) and any thread count give the same bits. Each ISA this CPU has runs the same
cases in a fresh process (FT_CPU_ISA).
"""

import ft_kernels as fk
import pytest
import torch
import torch.nn.functional as F
from fp32_bounds import gamma
from isa_run import run_all_in_isa
from ft_kernels import reference as R

# (L, Hk, Hv, Dk, Dv, extra y columns): Qwen3.5's head width (Dv 128: the 32-column vector blocks), a narrow
# last block (48 = 32 + 16), an odd Dk (the pass over rows in pairs has a tail), Hv = Hk, y wider than q | k | v
SHAPES = [
    (1, 2, 4, 16, 32, 0),
    (37, 2, 4, 16, 48, 0),
    (65, 1, 1, 15, 32, 3),
    (130, 2, 6, 32, 20, 0),
    (96, 4, 8, 128, 128, 0),
]


def make_case(L, Hk, Hv, Dk, Dv, extra, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    y = r(L, 2 * Hk * Dk + Hv * Dv + extra).to(dtype)
    decay = F.logsigmoid(r(L, Hv) + 2)
    beta = torch.rand(L, Hv, generator=g).to(dtype).float()
    state = r(Hv, Dk, Dv) * 0.3
    return y, decay, beta, state


def tol(L: int, Dk: int, Dv: int) -> float:
    return 2 * 4 * gamma(L + Dk + Dv)


def check(shape, dtype, seed=0):
    L, Hk, _, Dk, Dv, _ = shape
    y, g, beta, S0 = make_case(*shape, dtype, seed)
    S_ref, S = S0.clone(), S0.clone()
    want = R.gdn_prefill(y, g, beta, S_ref, Hk)
    got = fk.gdn_prefill(y, g, beta, S, Hk)
    assert got.dtype == torch.float32 and got.shape == want.shape
    t = tol(L, Dk, Dv)
    assert (got - want).abs().max() <= t * want.abs().max(), "out beyond the bound"
    assert (S - S_ref).abs().max() <= t * S_ref.abs().max(), "state beyond the bound"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_twin(shape, dtype):
    check(shape, dtype)


@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[4]])
def test_split_prompt_and_threads_give_the_same_bits(shape):
    """Two calls (a checkpoint after token 20) equal one, and one thread equals all of them, bit for bit."""
    y, g, beta, S0 = make_case(*shape, torch.bfloat16)
    Hk = shape[1]
    S1 = S0.clone()
    whole = fk.gdn_prefill(y, g, beta, S1, Hk)
    S2, out = S0.clone(), torch.empty_like(whole)
    fk.gdn_prefill(y[:20], g[:20], beta[:20], S2, Hk, out=out[:20])
    fk.gdn_prefill(y[20:], g[20:], beta[20:], S2, Hk, out=out[20:])
    assert torch.equal(out, whole) and torch.equal(S2, S1)
    n = fk.num_threads()
    fk.set_num_threads(1)
    try:
        S3 = S0.clone()
        one = fk.gdn_prefill(y, g, beta, S3, Hk)
    finally:
        fk.set_num_threads(n)
    assert torch.equal(one, whole) and torch.equal(S3, S1)


def test_bound_catches_a_decay_of_the_wrong_head():
    """Each head run with its neighbour's decay puts the outputs far outside the bound."""
    shape = SHAPES[4]
    y, g, beta, S0 = make_case(*shape, torch.float32)
    want = R.gdn_prefill(y, g, beta, S0.clone(), shape[1])
    got = fk.gdn_prefill(y, g.roll(1, dims=1).contiguous(), beta, S0.clone(), shape[1])
    assert (got - want).abs().max() > 1000 * tol(*shape[:1], *shape[3:5]) * want.abs().max()


def test_no_tokens_leaves_the_state():
    y, g, beta, S = make_case(4, 2, 4, 16, 32, 0, torch.float32)
    kept = S.clone()
    out = fk.gdn_prefill(y[:0], g[:0], beta[:0], S, 2)
    assert out.shape == (0, 4, 32) and torch.equal(S, kept)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda a: a.update(y=a["y"][:, :-1].contiguous()), "y must have at least C"),
        (lambda a: a.update(y=a["y"].half()), "y must be float32 or bfloat16"),
        (lambda a: a.update(state=a["state"].bfloat16()), "state must be float32"),
        (lambda a: a.update(g=a["g"][:, :1].contiguous()), "g must be float32"),
        (lambda a: a.update(beta=a["beta"].bfloat16()), "beta must be float32"),
        (lambda a: a.update(k_heads=3), "must divide"),
        (lambda a: a.update(out=torch.empty(4, 4, 16)), "out must be float32"),
    ],
)
def test_bad_arguments_raise_naming_them(mutate, match):
    y, g, beta, S = make_case(4, 2, 4, 16, 32, 0, torch.bfloat16)
    a = dict(y=y, g=g, beta=beta, state=S, k_heads=2, out=None)
    mutate(a)
    with pytest.raises((ValueError, TypeError), match=match):
        fk.gdn_prefill(**a)


def run_all():
    for shape in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            check(shape, dtype, seed=1)


@pytest.mark.parametrize("isa", fk.available_isas())
def test_each_isa(isa):
    run_all_in_isa("test_gdn_prefill", isa)
