"""ForwardBatch: a decode step's ``one_token`` batch equals the one built from tensors, and the padded-query
indices (dest, q_pos), built on first use, are right for ragged chunks."""

import torch

from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers.batch import ForwardBatch


def test_one_token_matches_tensor_batch():
    page = 4
    tables = [[5, 2], [7], [1, 3, 6]]
    positions = [5, 0, 9]
    ids = [11, 12, 13]
    slots = [t[p // page] * page + p % page for t, p in zip(tables, positions)]
    fb = ForwardBatch.one_token(ids, positions, slots, tables, page)
    ref = ForwardBatch(
        torch.tensor(ids),
        torch.tensor(positions),
        torch.tensor(slots),
        torch.tensor([[5, 2, 0], [7, 0, 0], [1, 3, 6]]),
        [1, 1, 1],
        [6, 1, 10],
        page,
    )
    for name in ("input_ids", "positions", "slots", "page_table", "dest", "q_pos"):
        a, b = getattr(fb, name), getattr(ref, name)
        assert a.dtype == b.dtype == torch.int64, name
        assert torch.equal(a, b), name
    assert fb.q_lens == ref.q_lens and fb.ctx_lens == ref.ctx_lens and fb.Lq == 1
    assert torch.equal(fb.ctx_tensor(), ref.ctx_tensor())
    assert torch.equal(fb.last_token_index(), torch.arange(3))
    assert torch.equal(fb.dest, torch.arange(3))
    assert torch.equal(fb.q_pos, torch.tensor([[5], [0], [9]]))


def test_padded_indices_of_ragged_chunks():
    fb = ForwardBatch(
        torch.zeros(6, dtype=torch.int64),
        torch.tensor([4, 5, 6, 0, 7, 8]),
        torch.zeros(6, dtype=torch.int64),
        torch.zeros(3, 1, dtype=torch.int64),
        [3, 1, 2],
        [7, 1, 9],
        16,
    )
    assert fb.Lq == 3
    assert fb.dest.tolist() == [0, 1, 2, 3, 6, 7]
    assert fb.q_pos.tolist() == [[4, 5, 6], [0, 0, 0], [7, 8, 0]]
    assert fb.last_token_index().tolist() == [2, 3, 5]
    assert fb.dest is fb.dest  # built once per forward


def test_kv_slot_matches_slots():
    kv = PagedKVCache([KVLayout(8, 4, 1, 2, 2, torch.float32)])
    kv.reserve(0, 5)  # pages 0, 1
    kv.reserve(3, 12)  # pages 2, 3, 4
    kv.free(0)  # pages back in the pool: sequence 3's table is not the identity
    kv.reserve(5, 9)
    for seq, n in ((3, 12), (5, 9)):
        assert [kv.slot(seq, p) for p in range(n)] == kv.slots(seq, torch.arange(n)).tolist()
