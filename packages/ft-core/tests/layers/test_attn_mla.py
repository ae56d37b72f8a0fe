"""MLA's decode on a GPU (``attn_mla.latent_decode``: the cached rows gathered by the page table, scores
masked by the lengths on the device) against its twin, ``ft_kernels.decode_attention`` with the pool as keys
and values (the CPU's path), on a real ``PagedKVCache`` and ``ForwardBatch.one_token``: 128 heads over one
row of 576 a token (DeepSeek-V3's latent and rope key), shuffled pages, contexts of 37, 12 and 1 keys,
within ``attention_tol``. The absorbed decode itself is checked against transformers step by step
(tests/test_arch_parity.py: deepseek_v3, kimi_k2 and the FP8 variant)."""

import ft_kernels
import pytest
import torch
from bounds import attention_tol

from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers.attn_mla import latent_decode
from ft_core.layers.batch import ForwardBatch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_latent_decode_matches_the_kernel(dtype):
    torch.manual_seed(3)
    N, W, page = 128, 576, 8
    kv = PagedKVCache([KVLayout(16, page, 1, W, 0, dtype)])
    kv.k[0].copy_(torch.randn(kv.k[0].shape) * 0.5)
    tables = [[7, 2, 9, 4, 12], [5, 11], [3]]
    pos = [36, 11, 0]
    slots = [t[p // page] * page + p % page for t, p in zip(tables, pos)]
    bt = ForwardBatch.one_token([1, 2, 3], pos, slots, tables, page)
    q = torch.randn(3, N, W).to(dtype)
    got = latent_decode(q, kv.k[0], bt, W**-0.5)
    want = ft_kernels.decode_attention(
        q.float(), kv.k[0], kv.k[0], bt.page_table, bt.ctx_tensor(), W**-0.5, 0, None
    )
    assert got.dtype == torch.float32 and got.shape == want.shape == (3, N, W)
    rows = (
        kv.k[0].view(-1, 1, W).transpose(0, 1).float()
    )  # every cached row [1, P S, W], for the max
    tol = attention_tol(q.float().view(3, 1, N, W).transpose(0, 1), rows, rows, W**-0.5)
    torch.testing.assert_close(got, want, rtol=0, atol=tol)
    # a step later: one more row each, read through the lengths alone
    bt.memo["ctx"] = bt.ctx_tensor() + 1
    moved = latent_decode(q, kv.k[0], bt, W**-0.5)
    assert ((moved - got).abs().flatten(1).amax(1) > tol).all()
