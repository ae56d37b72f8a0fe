"""The attention core (layers/attention.py): ``attend`` (fused kernels: SDPA, and sinks rescaled by each
row's log-sum-exp on the CPU flash kernel) against its reference twin ``attend_blocked``, for GQA
groupings, causal / windowed / padded masks, prompts longer than a query block, with and without
sinks; ``paged_attention``'s plain causal path (one prompt with no earlier context) against the same twin
on the masked, page-padded keys."""

import ft_kernels
import pytest
import torch
from bounds import attention_tol
from ft_core.layers import attention
from ft_core.layers.attention import attend, attend_blocked, paged_attention
from ft_core.layers.batch import ForwardBatch


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


@pytest.mark.parametrize(
    ("K", "G", "n", "window"),
    [(2, 2, 7, None), (1, 4, 300, None), (4, 1, 33, 64), (2, 3, 33, 8)],
)
def test_fresh_prompt_takes_plain_causal(K, G, n, window, monkeypatch):
    """One sequence whose new tokens are its whole context: keys cut to the context and ``is_causal`` (torch
    skips the blocks past the diagonal) instead of the [Lq, Lk] mask over page-padded keys -- the same result
    within the attention bound. A window narrower than the prompt (8 of 33) keeps the masked form."""
    torch.manual_seed(n + K)
    page, D = 16, 32
    pages = -(-n // page)
    bt = ForwardBatch(
        input_ids=torch.zeros(n, dtype=torch.int64),
        positions=torch.arange(n),
        slots=torch.arange(n),
        page_table=torch.arange(pages)[None],
        q_lens=[n],
        ctx_lens=[n],
        page_size=page,
    )
    q = torch.randn(n, K * G, D)
    k, v = torch.randn(1, pages * page, K, D), torch.randn(1, pages * page, K, D)
    k[:, n:], v[:, n:] = 1e4, -1e4  # page padding past the context: cut off, or masked
    if window is None or window >= n:  # the masked form must not run
        monkeypatch.setattr(
            attention, "attend", lambda *a, **kw: pytest.fail("took the masked form")
        )
    got = paged_attention(q, k, v, bt, D**-0.5, window)
    monkeypatch.undo()
    qb = q.view(1, n, K, G, D).permute(0, 2, 3, 1, 4)
    kk, vv = k[:, :n].transpose(1, 2), v[:, :n].transpose(1, 2)
    want = attend_blocked(qb, kk, vv, masks(1, n, n, window), D**-0.5)
    want = want.permute(0, 3, 1, 2, 4).reshape(n, K * G, D)
    tol = attention_tol(qb, kk, vv, D**-0.5, None)
    torch.testing.assert_close(got, want, rtol=0, atol=tol)


@pytest.mark.skipif(
    not ft_kernels.prefill_attention_simd(),
    reason="no AVX-512 BF16 build of prefill_attention runs here (CPU without it, or FT_CPU_ISA set lower): bf16 prefills keep the gather + SDPA path",
)
@pytest.mark.parametrize("window,sinks", [(None, False), (8, True)], ids=["causal", "window-sinks"])
def test_bf16_prefill_reads_the_pools_in_place(window, sinks, monkeypatch):
    """A bf16 CPU forward with a prompt chunk after earlier context and a decode token in one batch: attention
    runs ``ft_kernels.prefill_attention`` over the pools (the gather path must not run) and agrees with that
    twin path within its bound plus the kernel's bf16 weights (2^-8 max|v|) and both outputs' bf16 rounding."""
    from ft_core.cache.kv_cache import KVLayout, PagedKVCache

    torch.manual_seed(5)
    K, G, D, page = 2, 3, 64, 16
    kv = PagedKVCache([KVLayout(12, page, K, D, D, torch.bfloat16)])
    kv.k[0].copy_(torch.randn(kv.k[0].shape))
    kv.v[0].copy_(torch.randn(kv.v[0].shape))
    table = torch.tensor(
        [[7, 2, 9, 4], [5, 11, 0, 0]]
    )  # 50 keys, then 30 (padding entries point at page 0)
    bt = ForwardBatch(
        input_ids=torch.zeros(21, dtype=torch.int64),
        positions=torch.cat([torch.arange(30, 50), torch.tensor([29])]),
        slots=torch.zeros(21, dtype=torch.int64),
        page_table=table,
        q_lens=[20, 1],
        ctx_lens=[50, 30],
        page_size=page,
    )
    q = torch.randn(21, K * G, D).bfloat16()
    s = torch.randn(K * G) * 2 if sinks else None
    want = attention.paged_attention(q, *kv.gather(0, table), bt, D**-0.5, window, s)
    monkeypatch.setattr(attention, "paged_attention", lambda *a, **kw: pytest.fail("gathered"))
    got = attention.attend_paged(q, kv, 0, bt, D**-0.5, window, s)
    vmax = kv.v[0].float().abs().max().item()
    kall = (
        kv.k[0].view(-1, K, D).transpose(0, 1).float()
    )  # every cached key [K, P S, D], for the bound's max
    tol = attention_tol(q.float().view(21, K, G, D).transpose(0, 1), kall, kall, D**-0.5, s)
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=tol + 2**-7 * vmax)


DEVICE_DECODE = r"""
import sys, torch
sys.path.insert(0, TESTS)
from bounds import attention_tol
from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers import attention
from ft_core.layers.batch import ForwardBatch

torch.manual_seed(7)
K, G, D, page = 2, 3, 32, 8
for dtype in (torch.float32, torch.bfloat16):
    for window, sinks in ((None, False), (9, True)):
        kv = PagedKVCache([KVLayout(16, page, K, D, D, dtype)])
        kv.k[0].copy_(torch.randn(kv.k[0].shape))
        kv.v[0].copy_(torch.randn(kv.v[0].shape))
        tables = [[7, 2, 9, 4, 12], [5, 11], [3]]  # 37, 12 and 1 keys with this step's
        pos = [36, 11, 0]
        bt = ForwardBatch.one_token([1, 2, 3], pos, [t[p // page] * page + p % page for t, p in zip(tables, pos)],
                                    tables, page)
        kv.write(0, bt.slots, torch.randn(3, K, D), torch.randn(3, K, D))
        q = torch.randn(3, K * G, D).to(dtype)
        s = torch.randn(K * G) * 2 if sinks else None
        want = attention.paged_attention(q, *kv.gather(0, bt.page_table), bt, D**-0.5, window, s)
        got = attention.device_decode(q, kv.k[0], kv.v[0], bt.page_table, bt.ctx_tensor(), D**-0.5, window, s)
        assert got.dtype == dtype and got.shape == want.shape
        kall = kv.k[0].view(-1, K, D).transpose(0, 1).float()
        tol = attention_tol(q.float().view(3, K, G, D).transpose(0, 1), kall, kall, D**-0.5, s)
        if dtype == torch.bfloat16:  # the kernel's bf16 weights, and both outputs rounded to bf16
            tol += 2**-7 * kv.v[0].float().abs().max().item()
        torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=tol)
        # a step later the same launch reads one more key of each sequence: the context from the batch
        bt2 = ForwardBatch.one_token([1, 2, 3], [p + 1 for p in pos],
                                     [t[(p + 1) // page] * page + (p + 1) % page for t, p in zip(tables, pos)],
                                     tables, page)
        moved = attention.device_decode(q, kv.k[0], kv.v[0], bt2.page_table, bt2.ctx_tensor(), D**-0.5,
                                          window, s)
        assert ((moved.float() - got.float()).abs().flatten(1).amax(1) > tol).all()  # each sequence
print("ok")
"""


def test_device_decode_reads_the_pools_under_interpreter():
    """A GPU decode step's attention (``device_decode``: the Triton kernel over the pools in place, run by
    Triton's interpreter in a fresh process) agrees with the gather + ``paged_attention`` twin on a real
    ``PagedKVCache`` and ``ForwardBatch.one_token`` (fp32 and bf16, a window with sinks, contexts of 37, 12
    and 1 keys), within ``attention_tol`` (bf16: plus the kernel's bf16 weights and both outputs' rounding);
    the next step's batch (one more key each) moves each sequence's output by more than that."""
    import os
    import subprocess
    import sys

    import bounds

    tests = os.path.dirname(bounds.__file__)  # the workspace tests' helpers, for the fresh process
    res = subprocess.run(
        [sys.executable, "-c", f"TESTS = {tests!r}\n" + DEVICE_DECODE],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]


DEVICE_PREFILL = r"""
import sys, torch
sys.path.insert(0, TESTS)
from bounds import attention_tol
from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers import attention
from ft_core.layers.batch import ForwardBatch

torch.manual_seed(9)
K, G, D, page = 2, 3, 32, 8
table = torch.tensor([[7, 2, 9, 4, 12, 1, 6], [5, 11, 3, 0, 0, 0, 0], [8, 10, 0, 0, 0, 0, 0]])
q_lens, ctx = [20, 1, 12], [50, 20, 12]  # a chunk after context, a decode token, a fresh prompt
pos = torch.cat([torch.arange(c - n, c) for n, c in zip(q_lens, ctx)])
for dtype in (torch.float32, torch.bfloat16):
    for window, sinks in ((None, False), (9, True)):
        kv = PagedKVCache([KVLayout(13, page, K, D, D, dtype)])
        kv.k[0].copy_(torch.randn(kv.k[0].shape))
        kv.v[0].copy_(torch.randn(kv.v[0].shape))
        bt = ForwardBatch(torch.zeros(33, dtype=torch.int64), pos, torch.zeros(33, dtype=torch.int64), table,
                          q_lens, ctx, page)
        q = torch.randn(33, K * G, D).to(dtype)
        s = torch.randn(K * G) * 2 if sinks else None
        want = attention.paged_attention(q, *kv.gather(0, table), bt, D**-0.5, window, s)
        got = attention.device_prefill(q, kv.k[0], kv.v[0], bt, D**-0.5, window, s)
        assert got.dtype == dtype and got.shape == want.shape
        kall = kv.k[0].view(-1, K, D).transpose(0, 1).float()
        tol = attention_tol(q.float().view(33, K, G, D).transpose(0, 1), kall, kall, D**-0.5, s)
        if dtype == torch.bfloat16:  # the kernel's bf16 weights, and both outputs rounded to bf16
            tol += 2**-7 * kv.v[0].float().abs().max().item()
        torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=tol)
print("ok")
"""


def test_device_prefill_reads_the_pools_under_interpreter():
    """A GPU prefill's attention (``device_prefill``: the Triton kernel over the pools in place, run by Triton's
    interpreter in a fresh process) agrees with the gather + ``paged_attention`` twin on a real
    ``PagedKVCache`` with a chunk after earlier context, a decode token and a fresh prompt in one batch (fp32
    and bf16, causal, and a window with sinks), within ``attention_tol`` (bf16: plus the kernel's bf16 weights
    and both outputs' rounding)."""
    import os
    import subprocess
    import sys

    import bounds

    res = subprocess.run(
        [sys.executable, "-c", f"TESTS = {os.path.dirname(bounds.__file__)!r}\n" + DEVICE_PREFILL],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
