"""A window kept as state (GPT-OSS, layers/attn_window.py): prefill chunks through ``window_attention``'s
unrolled form, then decode steps through ``window_decode`` (each new key written into its ring row, the
decode kernel over the ring in place), against float64 windowed attention over each sequence's whole
history, across the ring's wrap, with and without sinks."""

import pytest
import torch
from bounds import attention_tol

from ft_core.cache.state_store import StateBatch, StateLayout, StatePool
from ft_core.layers import attn_window
from ft_core.layers.attn_window import window_attention
from ft_core.layers.batch import ForwardBatch

W, K, G, D = 6, 2, 3, 16
N = K * G
SCALE = D**-0.5


def reference(q, keys, vals, sinks):
    """q [N, D] of the newest position over its visible keys / values [Lk, K, D], float64 -> [N, D]."""
    kk = keys.double().repeat_interleave(G, dim=1)  # [Lk, N, D]
    vv = vals.double().repeat_interleave(G, dim=1)
    s = torch.einsum("nd,lnd->nl", q.double(), kk) * SCALE
    if sinks is not None:
        s = torch.cat([s, sinks.double()[:, None]], dim=1)
    p = torch.softmax(s, dim=1)[:, : kk.shape[0]]
    return torch.einsum("nl,lnd->nd", p, vv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_window_decode_reads_the_ring(dtype, with_sinks):
    g = torch.Generator().manual_seed(3 + with_sinks)
    pool = StatePool(StateLayout((((((W, K, D), dtype), ((W, K, D), dtype))),)), 4)
    slots = [pool.alloc() for _ in range(3)]
    sinks = torch.randn(N, generator=g) * 2 if with_sinks else None
    hist_k, hist_v = [], []
    calls = []
    real = attn_window.window_decode

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    attn_window.window_decode = spy
    try:
        for b, P in enumerate((5, 1, 9)):  # inside the window, one token, past it
            k, v = (torch.randn(P, K, D, generator=g).to(dtype) for _ in range(2))
            q = torch.randn(P, N, D, generator=g).to(dtype)
            batch = ForwardBatch(
                torch.zeros(P, dtype=torch.int64),
                torch.arange(P),
                torch.zeros(P, dtype=torch.int64),
                torch.zeros(1, 1, dtype=torch.int64),
                [P],
                [P],
                16,
                StateBatch(pool, [slots[b]]),
            )
            window_attention(q, k, v, batch, 0, SCALE, sinks)
            hist_k.append(list(k))
            hist_v.append(list(v))
        assert len(calls) == 1  # the one-token prompt is a decode-sized forward
        for step in range(8):  # the first sequence wraps its ring on the second step
            pos = [len(h) for h in hist_k]
            batch = ForwardBatch.one_token(
                [0] * 3, pos, [0] * 3, [[0]] * 3, 16, StateBatch(pool, slots)
            )
            k, v = (torch.randn(3, K, D, generator=g).to(dtype) for _ in range(2))
            q = torch.randn(3, N, D, generator=g).to(dtype)
            got = window_attention(q, k, v, batch, 0, SCALE, sinks)
            assert got.dtype == dtype and got.shape == (3, N, D)
            for b in range(3):
                hist_k[b].append(k[b])
                hist_v[b].append(v[b])
                keys = torch.stack(hist_k[b][-W:]).float()
                vals = torch.stack(hist_v[b][-W:]).float()
                want = reference(q[b], keys, vals, sinks)
                qg = q[b].float().view(K, G, 1, D)
                tol = attention_tol(qg, keys.transpose(0, 1), vals.transpose(0, 1), SCALE, sinks)
                if (
                    dtype == torch.bfloat16
                ):  # bf16 weights in the kernel, the output rounded to bf16
                    tol += 2**-7 * vals.abs().max().item()
                err = (got[b].double() - want).abs().max().item()
                assert err <= tol, (step, b, err, tol)
        assert len(calls) == 9
    finally:
        attn_window.window_decode = real
