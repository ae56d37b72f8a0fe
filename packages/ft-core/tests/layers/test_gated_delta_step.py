"""gated_delta_step (the decode step of the gated delta rule, the state updated in place) against its
twin, recurrent_gated_delta_rule with one token per sequence."""

import pytest
import torch
from bounds import gamma

from ft_core.layers.gated_delta import gated_delta_step, recurrent_gated_delta_rule


@pytest.mark.parametrize(
    "B,hk,hv,dk,dv", [(1, 2, 2, 16, 16), (3, 2, 4, 16, 32), (2, 16, 32, 128, 128), (4, 1, 3, 8, 24)]
)
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_step_matches_the_recurrent_rule(B, hk, hv, dk, dv, state_dtype):
    g = torch.Generator().manual_seed(B * 1000 + hv)
    q, k = torch.randn(B, hk, dk, generator=g), torch.randn(B, hk, dk, generator=g)
    v = torch.randn(B, hv, dv, generator=g)
    decay = -torch.rand(B, hv, generator=g) * 2  # log decay <= 0
    beta = torch.rand(B, hv, generator=g)
    state = torch.randn(B, hv, dk, dv, generator=g).to(state_dtype)
    before = state.clone()
    want_o, want_S = recurrent_gated_delta_rule(
        q[:, None], k[:, None], v[:, None], decay[:, None], beta[:, None], state
    )
    assert torch.equal(state, before)  # the twin leaves it alone
    o, S = gated_delta_step(q, k, v, decay, beta, state)
    # float32: a Dk- or Dv-long dot product per stage, 4 rounded stages, both sides (x 2)
    tol = 2 * 4 * gamma(1 + dk + dv)
    assert (o - want_o[:, 0]).abs().max() <= tol * want_o.abs().max()
    assert (S - want_S).abs().max() <= tol * want_S.abs().max()
    if state_dtype == torch.float32:  # the caller's gathered copy is updated in place
        assert S.data_ptr() == state.data_ptr()
    else:
        assert torch.equal(state, before) and S.dtype == torch.float32
