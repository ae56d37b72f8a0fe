"""causal_conv (a Gated DeltaNet layer's short depthwise conv + SiLU over a chunk, Kc shifted products a
channel) against its twin, torch's depthwise conv1d in float64 over the previous inputs and the chunk;
and the window it returns, from which the conv state after any prefix of the chunk is read."""

import pytest
import torch
import torch.nn.functional as F
from bounds import gamma

from ft_core.layers.gated_delta import causal_conv

BF16_U = 2.0**-8  # bf16's unit roundoff


@pytest.mark.parametrize("L", [1, 2, 3, 7, 130])
@pytest.mark.parametrize("kc", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_conv_matches_conv1d(L, kc, dtype):
    g = torch.Generator().manual_seed(L * 10 + kc)
    C = 48
    x = torch.randn(L, C, generator=g).to(dtype)
    state = torch.randn(C, kc - 1, generator=g).to(dtype)
    w = torch.randn(C, kc, generator=g).to(dtype)
    y, window = causal_conv(x, state, w)
    assert y.dtype == dtype and y.shape == (L, C) and window.shape == (kc - 1 + L, C)

    seq = torch.cat([state, x.t()], dim=1).double()  # [C, Kc-1+L]
    pre = F.conv1d(seq[None], w.double()[:, None], groups=C)[0].t()  # [L, C]
    want = F.silu(pre)
    mag = F.conv1d(seq.abs()[None], w.double().abs()[:, None], groups=C)[0].t()  # sum |s w|
    # Kc products (exact in fp32 for bf16 operands) summed in fp32; SiLU's slope is below 1.1
    tol = 1.1 * gamma(kc + 1) * mag + gamma(2) * want.abs()
    if dtype == torch.bfloat16:  # the sum rounded to bf16, then SiLU's result rounded again
        tol = tol + 1.1 * BF16_U * pre.abs() + BF16_U * want.abs() * 1.01
    err = (y.double() - want).abs()
    assert (err <= tol + 1e-30).all(), (err - tol).max()

    # the state after the first n new inputs: the last Kc-1 of the previous inputs and those n
    for n in range(L + 1):
        got = window[n : n + kc - 1].t()
        assert torch.equal(got, seq[:, n : n + kc - 1].to(dtype)), n


def test_causal_conv_chunks_compose():
    """Two chunks through the window's state equal one chunk of both (bit for bit: each output reads
    the same Kc inputs in the same order)."""
    g = torch.Generator().manual_seed(7)
    C, kc = 40, 4
    x = torch.randn(11, C, generator=g).to(torch.bfloat16)
    state = torch.randn(C, kc - 1, generator=g).to(torch.bfloat16)
    w = torch.randn(C, kc, generator=g).to(torch.bfloat16)
    whole, _ = causal_conv(x, state, w)
    a, win = causal_conv(x[:5], state, w)
    b, _ = causal_conv(x[5:], win[5:].t(), w)
    assert torch.equal(torch.cat([a, b]), whole)
