"""ft_kernels.gdn_decode (the Gated DeltaNet decode core) against float64 stage by stage, and its twin.

Bound, from the arithmetic (fp32_bounds.gdn_decode_bound): every stage's float32 error propagated to first
order, each rounding to bf16 allowed one spacing where the exact value lies within the error of a rounding
midpoint (and none elsewhere). The conv states move on bit for bit. A wrong tap, head mapping, gate, decay or
rounding point moves outputs by ~2^-8 of their size or more, far above the bound on nearly every element.
Each ISA this CPU has runs the same cases in a fresh process (FT_CPU_ISA).
"""

import ft_kernels as fk
import pytest
import torch
from isa_run import run_all_in_isa
from fp32_bounds import gdn_decode_bound
from ft_kernels import reference as R

# (B, N, Hk, Hv, Dk, Dv, Kc): Qwen3.5's head shape (Dv 128, the compiled fast path), Hv = Hk, uneven dims with
# vector tails, a two-tap conv
SHAPES = [
    (1, 2, 4, 8, 128, 128, 4),
    (3, 5, 2, 4, 32, 48, 4),
    (2, 3, 1, 3, 16, 20, 3),
    (4, 4, 4, 4, 8, 8, 4),
    (2, 2, 2, 2, 24, 128, 2),
]


def make_case(B, N, Hk, Hv, Dk, Dv, Kc, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    C = 2 * Hk * Dk + Hv * Dv
    proj = (r(B, C + Hv * Dv + 2 * Hv) * 2).to(dtype)
    conv_w = (r(C, Kc) * 0.5).to(dtype)
    conv_state = r(N, C, Kc - 1).to(dtype)
    state = r(N, Hv, Dk, Dv) * 0.3
    slots = torch.randperm(N, generator=g)[:B]
    neg_A = -torch.rand(Hv, generator=g) * 3
    dt_bias = r(Hv)
    norm_w = (1 + r(Dv) * 0.2).to(dtype)
    return proj, conv_w, conv_state, state, slots, neg_A, dt_bias, norm_w


def check(shape, dtype, seed=0):
    N, Hk = shape[1], shape[2]
    proj, conv_w, cs, st, slots, neg_A, dt_bias, norm_w = make_case(*shape, dtype, seed)
    want, err, S1, e_S1 = gdn_decode_bound(
        proj, conv_w, cs, st, slots, neg_A, dt_bias, norm_w, 1e-6, Hk
    )
    want_conv = torch.cat([cs[slots], proj[:, : cs.shape[1], None]], dim=2)[:, :, 1:]
    untouched = [i for i in range(N) if i not in slots.tolist()]
    for run in (fk.gdn_decode, R.gdn_decode):
        cs2, st2 = cs.clone(), st.clone()
        got = run(proj, conv_w, cs2, st2, slots, neg_A, dt_bias, norm_w, 1e-6, Hk)
        assert got.dtype == dtype and got.shape == want.shape
        over = (got.double() - want).abs() - err
        assert over.max() <= 0, f"{run.__module__}: out off by {over.max():.3g} beyond the bound"
        assert ((st2[slots].double() - S1).abs() - e_S1).max() <= 0, (
            f"{run.__module__}: state beyond bound"
        )
        assert torch.equal(cs2[slots], want_conv)
        assert torch.equal(cs2[untouched], cs[untouched]) and torch.equal(
            st2[untouched], st[untouched]
        )
    return err


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_float64(shape, dtype):
    check(shape, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bound_catches_a_decay_of_the_wrong_head(dtype):
    """The bound is far below what a real mistake moves: each head run with its neighbour's decay puts most
    outputs outside it, while the bound itself stays within 2^-6 of the output nearly everywhere."""
    proj, conv_w, cs, st, slots, neg_A, dt_bias, norm_w = make_case(*SHAPES[0], dtype)
    want, err, _, _ = gdn_decode_bound(proj, conv_w, cs, st, slots, neg_A, dt_bias, norm_w, 1e-6, 4)
    assert (err <= 2.0**-6 * want.abs() + 1e-6).double().mean() > 0.99
    got = fk.gdn_decode(
        proj, conv_w, cs.clone(), st.clone(), slots, neg_A.roll(1), dt_bias, norm_w, 1e-6, 4
    )
    assert ((got.double() - want).abs() > err).double().mean() > 0.5


def test_decays_to_zero_and_keeps_exact_zero_state():
    """A huge decay (a = +inf-like) empties the state before the update: the new state is k delta^T alone."""
    shape = (1, 1, 1, 1, 16, 16, 4)
    proj, conv_w, cs, st, slots, neg_A, dt_bias, norm_w = make_case(*shape, torch.float32)
    proj[:, -1] = 80.0  # a: g = neg_A * 80 -> e^g = 0
    neg_A[:] = -5.0
    st2 = st.clone()
    fk.gdn_decode(proj, conv_w, cs.clone(), st2, slots, neg_A, dt_bias, norm_w, 1e-6, 1)
    assert torch.linalg.matrix_rank(st2[0, 0]) == 1  # rank one: k delta^T


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda a: a.update(proj=a["proj"][:, :-1].contiguous()), "proj must have"),
        (lambda a: a.update(slots=torch.tensor([0, 0])), "is repeated"),
        (lambda a: a.update(slots=torch.tensor([0, 9])), r"is outside \[0, 3\)"),
        (lambda a: a.update(conv_w=a["conv_w"].float()), "conv_w must be"),
        (lambda a: a.update(state=a["state"].bfloat16()), "state must be float32"),
        (lambda a: a.update(neg_A=a["neg_A"][:1].contiguous()), "neg_A must be float32"),
        (lambda a: a.update(k_heads=3), "must divide"),
    ],
)
def test_bad_arguments_raise_naming_them(mutate, match):
    proj, conv_w, cs, st, slots, neg_A, dt_bias, norm_w = make_case(
        2, 3, 2, 4, 16, 16, 4, torch.bfloat16
    )
    a = dict(proj=proj, conv_w=conv_w, conv_state=cs, state=st, slots=torch.tensor([0, 2]), neg_A=neg_A,
             dt_bias=dt_bias, norm_w=norm_w, eps=1e-6, k_heads=2)  # fmt: skip
    mutate(a)
    with pytest.raises(ValueError, match=match):
        fk.gdn_decode(**a)


def run_all():
    for shape in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            check(shape, dtype, seed=1)


@pytest.mark.parametrize("isa", fk.available_isas())
def test_each_isa(isa):
    run_all_in_isa("test_gdn_decode", isa)
