"""chunk_gated_delta_rule (prefill's chunked WY form: each chunk's unit lower-triangular system inverted, then
the pseudo-values and key weights by two products) against its twin, recurrent_gated_delta_rule token by
token: outputs and the final state, below, across and past chunk borders, with key heads shared by value
heads, from a zero and a random state, bf16 and fp32 inputs."""

import pytest
import torch
import torch.nn.functional as F
from bounds import gamma

from ft_core.layers.gated_delta import chunk_gated_delta_rule, recurrent_gated_delta_rule


def rule_tol(L: int, dk: int, dv: int) -> float:
    """max |chunked - recurrent| / max |recurrent| in float32: a token's contribution reaches an output
    through at most L state updates and Dk- and Dv-long dot products, each rounded (gamma(L + Dk + Dv));
    4 rounded stages a token (k.S, the delta, the rank-1 update, q.S); both forms err (x 2). A wrong
    decay, gate or state hand-over is O(1). (The bound of test_gated_delta_fla.py's fla comparison.)"""
    return 2 * 4 * gamma(L + dk + dv)


@pytest.mark.parametrize(
    "L,hk,hv,dk,dv",
    [
        (1, 2, 4, 16, 32),
        (37, 2, 4, 16, 32),
        (64, 1, 1, 32, 16),
        (65, 2, 2, 16, 16),
        (200, 2, 6, 32, 32),
    ],
)
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_matches_recurrent(L, hk, hv, dk, dv, init, dtype):
    g = torch.Generator().manual_seed(L * 7 + hv + init)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    q, k, v = r(L, hk, dk).to(dtype), r(L, hk, dk).to(dtype), r(L, hv, dv).to(dtype)
    decay, beta = F.logsigmoid(r(L, hv) + 2), torch.rand(L, hv, generator=g).to(dtype)
    S0 = r(hv, dk, dv) if init else torch.zeros(hv, dk, dv)
    kept = S0.clone()
    o, S = chunk_gated_delta_rule(q, k, v, decay, beta, S0)
    ro, rS = recurrent_gated_delta_rule(
        q[None], k[None], v[None], decay[None], beta[None], S0[None]
    )
    assert torch.equal(S0, kept)
    assert (
        o.shape == (L, hv, dv) and S.shape == (hv, dk, dv) and o.dtype == S.dtype == torch.float32
    )
    tol = rule_tol(L, dk, dv)
    assert (o - ro[0]).abs().max() <= tol * ro.abs().max()
    assert (S - rS[0]).abs().max() <= tol * rS.abs().max()
