"""The attention core (layers/attention.py): ``attend`` (fused kernels: SDPA, and sinks rescaled by each
row's log-sum-exp on the CPU flash kernel) against its reference twin ``attend_blocked``, for GQA
groupings, causal / windowed / padded masks, prompts longer than a query block, with and without
sinks."""

import pytest
import torch
from bounds import attention_tol
from ft_core.layers import attention
from ft_core.layers.attention import attend, attend_blocked


def masks(B, Lq, Lk, window):
    """Causal masks of B sequences whose chunks end at Lk - b (shorter sequences pad their last rows)."""
    qpos = torch.arange(Lk - Lq, Lk)[None, :, None] - torch.arange(B)[:, None, None]  # [B, Lq, 1]
    kpos = torch.arange(Lk)[None, None]
    m = (kpos <= qpos) & (kpos > (qpos - window if window else -1))
    m[:, :, 0] |= ~m.any(-1)  # every row sees a key (as ForwardBatch's masks guarantee)
    return m


@pytest.mark.parametrize("sinks", [False, True], ids=["plain", "sinks"])
@pytest.mark.parametrize(
    ("K", "G", "Lq", "Lk", "window"),
    [
        (2, 2, 7, 7, None),
        (1, 4, 5, 20, None),
        (2, 3, 300, 340, None),
        (4, 1, 33, 33, 8),
        (2, 2, 1, 17, None),
    ],
)
def test_attend_matches_blocked_reference(K, G, Lq, Lk, window, sinks):
    torch.manual_seed(K * 100 + Lq)
    B, D = 2, 16
    q, k, v = torch.randn(B, K, G, Lq, D), torch.randn(B, K, Lk, D), torch.randn(B, K, Lk, D)
    s = torch.randn(K * G) * 2 if sinks else None
    m = masks(B, Lq, Lk, window)
    want = attend_blocked(q, k, v, m, D**-0.5, s)
    tol = attention_tol(q, k, v, D**-0.5, s)
    torch.testing.assert_close(attend(q, k, v, m, D**-0.5, s), want, rtol=0, atol=tol)


def test_sinks_use_the_fused_kernel_when_torch_has_it():
    """The CPU flash kernel with log-sum-exp exists in the torch this workspace pins: prefills of sink
    models do not fall back to the blocked form."""
    assert attention._FLASH_CPU is not None
    B, K, G, L, D = 1, 2, 2, 9, 8
    q, k, v = torch.randn(B, K, G, L, D), torch.randn(B, K, L, D), torch.randn(B, K, L, D)
    m, s = masks(B, L, L, None), torch.randn(K * G)
    torch.testing.assert_close(
        attention._attend_sinks_fused(q, k, v, m, 0.3, s),
        attend_blocked(q, k, v, m, 0.3, s),
        rtol=0,
        atol=attention_tol(q, k, v, 0.3, s),
    )
