"""ft_kernels.route_topk (MoE top-k routes on the calling thread) against its torch twin and float64.

Ids must equal the twin's (distinct random logits: no near-ties). Gates: elementwise relative bound from the fp32
arithmetic against float64: the difference l - max (u |l - max|), exp (2u), the sum over E (gamma(E)), the division
(u); renormalisation doubles that and adds gamma(k) and a division."""

import math

import ft_kernels as fk
import pytest
import torch
from ft_kernels import reference as R

U = 2.0**-24


def _gamma(n):
    return n * U / (1 - n * U)


def _bound(logits, k, renorm):
    d = (logits.double() - logits.double().max(-1, keepdim=True).values).abs().max().item()
    rel = U * (d + 3) + _gamma(logits.shape[1] + k)
    return 2 * rel + _gamma(k) + U if renorm else rel


@pytest.mark.parametrize(
    "kind,renorm", [("softmax", False), ("softmax", True), ("topk_softmax", False)]
)
@pytest.mark.parametrize("E,k", [(8, 2), (60, 4), (128, 8), (256, 8), (32, 1), (16, 16)])
@pytest.mark.parametrize("T", [1, 3, 17])
def test_matches_twin_and_float64(T, E, k, kind, renorm):
    g = torch.Generator().manual_seed(T * 1000 + E + k)
    logits = torch.randn(T, E, generator=g) * 3
    base = 5 * E
    tok, eid, gate = fk.route_topk(logits, k, kind, renorm, base)
    rtok, reid, _ = R.route_topk(logits, k, kind, renorm, base)
    assert tok.dtype == eid.dtype == torch.int32 and gate.dtype == torch.float32
    assert torch.equal(tok, rtok) and torch.equal(eid, reid)
    _, _, exact = R.route_topk(logits.double(), k, kind, renorm, base)
    rel = ((gate.double() - exact).abs() / exact).max().item()
    assert rel <= _bound(logits, k, renorm), rel


@pytest.mark.parametrize("kind", ["softmax", "topk_softmax"])
@pytest.mark.parametrize("E,k", [(128, 8), (64, 8), (8, 2), (256, 4), (512, 8), (16, 16)])
def test_ties_pick_what_torch_picks(E, k, kind):
    """Equal values are frequent among bf16 logits; the picks must be torch.topk's (the reference and
    transformers' routers), for both of its algorithms (k * 64 <= E: partial sort, else nth_element)."""
    g = torch.Generator().manual_seed(E + k)
    for logits in (
        torch.zeros(2, E),
        (torch.randn(9, E, generator=g) * 0.25).bfloat16().float(),
        torch.randint(0, 3, (9, E), generator=g).float(),
    ):
        tok, eid, gate = fk.route_topk(logits, k, kind, True)
        rtok, reid, rgate = R.route_topk(logits, k, kind, True)
        assert torch.equal(eid, reid), (eid.view(-1, k), reid.view(-1, k))
        assert torch.allclose(gate, rgate, rtol=1e-5, atol=0)


def test_nan_ranks_first_and_stays_in_its_token():
    logits = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    logits[1, 4] = float("nan")
    _, eid, gate = fk.route_topk(logits, 3, "softmax")
    assert gate.view(3, 3)[1].isnan().all() and gate.view(3, 3)[[0, 2]].isfinite().all()
    _, eid, gate = fk.route_topk(logits, 2, "topk_softmax")
    assert (
        eid.view(3, 2)[1, 0] == 4
        and gate.view(3, 2)[1].isnan().all()
        and gate.view(3, 2)[[0, 2]].isfinite().all()
    )


def test_no_tokens():
    tok, eid, gate = fk.route_topk(torch.zeros(0, 8), 2)
    assert tok.numel() == eid.numel() == gate.numel() == 0


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: fk.route_topk(torch.zeros(2, 8), 9), r"k must be in \[1, E=8\]"),
        (lambda: fk.route_topk(torch.zeros(2, 8), 0), r"k must be in \[1, E=8\]"),
        (lambda: fk.route_topk(torch.zeros(2, 8).double(), 2), "logits must be float32"),
        (lambda: fk.route_topk(torch.zeros(8), 2), "logits must be float32 \\[T, E\\]"),
        (
            lambda: fk.route_topk(torch.zeros(2, 8), 2, "sigmoid"),
            "kind must be one of softmax, topk_softmax",
        ),
        (
            lambda: fk.route_topk(torch.zeros(2, 8), 2, base=2**31 - 4),
            "base must keep expert ids within int32",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bound_fails_a_wrong_gate():
    """The bound is tight enough to see a gate off by a few ulps' worth of a real mistake (no renorm)."""
    logits = torch.randn(4, 128, generator=torch.Generator().manual_seed(0)) * 3
    _, _, exact = R.route_topk(logits.double(), 8, "softmax", True)
    _, _, gate = fk.route_topk(
        logits, 8, "softmax", False
    )  # forgot to renormalise: must fail the renorm bound
    assert ((gate.double() - exact).abs() / exact).max().item() > _bound(logits, 8, True)
    assert math.isfinite(_bound(logits, 8, True))
