"""ExpertCache control step against a plain-Python model of one global LRU across layers."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ft_core.experts.bank import ExpertBank
from ft_core.experts.cache import ExpertCache
from ft_core.experts.cached import q_policy


def _bank(n_ids: int) -> ExpertBank:
    b = ExpertBank("bf16", num_experts=n_ids, hidden=4, inter=2, act="swiglu")
    b.tensors["w13"] = torch.arange(n_ids * 16, dtype=torch.float32).view(n_ids, 4, 4).bfloat16()
    b.tensors["w2"] = torch.arange(n_ids * 8, dtype=torch.float32).view(n_ids, 4, 2).bfloat16()
    return b


class ModelLRU:
    """Slots as a list of [id, last_use]; the rules of DESIGN §3 written the obvious way."""

    def __init__(self, slots: int):
        self.slots = [[-1, -1] for _ in range(slots)]
        self.clock = 0

    def step(self, ids: list[int], q_of_m) -> list[int]:
        self.clock += 1
        where = {sid: i for i, (sid, _) in enumerate(self.slots) if sid >= 0}
        counts: dict[int, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
        for i in counts:
            if i in where:
                self.slots[where[i]][1] = self.clock
        misses = sorted((i for i in counts if i not in where), key=lambda i: (-counts[i], i))
        free = [s for s in range(len(self.slots)) if self.slots[s][1] != self.clock]
        q = min(q_of_m(len(misses)), len(misses), len(free))
        victims = sorted(free, key=lambda s: (self.slots[s][1], s))[:q]
        for i, s in zip(misses[:q], victims):
            self.slots[s] = [i, self.clock]
            where = {sid: k for k, (sid, _) in enumerate(self.slots) if sid >= 0}
        return [where.get(i, -1) for i in ids]


@settings(max_examples=60, deadline=None)
@given(
    n_ids=st.integers(2, 24),
    slots=st.integers(1, 12),
    policy=st.sampled_from(["fill", "hybrid"]),
    ratio=st.sampled_from([0.1, 0.5, 1.0, 3.0]),
    steps=st.lists(st.lists(st.integers(0, 23), min_size=0, max_size=10), min_size=1, max_size=25),
)
def test_matches_python_lru(n_ids, slots, policy, ratio, steps):
    cache = ExpertCache(_bank(n_ids), slots)
    model = ModelLRU(cache.num_slots)
    q_of_m = q_policy(policy, ratio)
    for ids in steps:
        ids = [i % n_ids for i in ids]
        res = cache.control(torch.tensor(ids, dtype=torch.int64), q_of_m)
        assert res.route_slot.tolist() == model.step(ids, q_of_m)
        cache.check()
        assert [s[0] for s in model.slots] == cache.id_of_slot.tolist()


def test_edge_cases_no_routes_fill_all_and_tiny_cache():
    cache = ExpertCache(_bank(8), 2)
    fill = q_policy("fill", None)
    r = cache.control(torch.zeros(0, dtype=torch.int64), fill)  # m = 0
    assert r.misses == 0 and r.copy_ids.numel() == 0
    r = cache.control(torch.tensor([3, 5, 3, 7, 7, 7]), fill)  # more distinct ids than slots
    assert r.misses == 3 and r.copy_ids.tolist() == [7, 3]  # most routed first, then lower id
    assert r.route_slot.tolist() == [1, -1, 1, 0, 0, 0]
    r = cache.control(
        torch.tensor([5]), fill
    )  # q = m = 1: evicts the least recently used (ties: lower slot)
    assert r.copy_ids.tolist() == [5] and r.copy_slots.tolist() == [0] and r.evictions == 1
    cache.check()


def test_hybrid_q_rule():
    q = q_policy("hybrid", 0.3)
    assert [q(m) for m in range(6)] == [0, 1, 1, 1, 1, 2]
    assert [q_policy("hybrid", 5.0)(m) for m in range(4)] == [0, 1, 2, 3]  # B_P >= B_H: fill-only


def test_copy_in_copies_every_bank_row():
    bank = _bank(6)
    cache = ExpertCache(bank, 3)
    r = cache.control(torch.tensor([4, 1]), q_policy("fill", None))
    cache.copy_in(r.copy_ids, r.copy_slots)
    for i, s in zip(r.copy_ids.tolist(), r.copy_slots.tolist()):
        for k in bank.tensors:
            assert torch.equal(cache.store[k][s], bank.tensors[k][i])


def test_record_routing_writes_one_line_per_forward(demo_dir, tmp_path):
    import json

    from ft_core import Engine, SamplingParams

    path = tmp_path / "trace.jsonl"
    eng = Engine.from_pretrained(demo_dir, record_routing=str(path))
    out = eng.generate(
        [[5, 6, 7], [8, 9]], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    )
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["phase"] for r in recs] == ["prefill", "decode", "decode", "decode"]
    assert recs[0]["seq_tokens"] == [3, 2] and recs[1]["seq_tokens"] == [1, 1]
    E, k = eng.model_config.moe.num_experts, eng.model_config.moe.top_k
    for r in recs:
        assert len(r["layers"]) == sum(eng.model_config.moe_layers)
        for m, layer in enumerate(r["layers"]):
            assert len(layer) == sum(r["seq_tokens"]) and all(len(t) == k for t in layer)
            assert all(m * E <= i < (m + 1) * E for t in layer for i in t)
    assert len(out[0].token_ids) == 4
