"""The cache-policy simulator of benchmarks/ (cache_sim.py) on hand-made traces."""

import importlib.util
import random
from collections import Counter
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


sim = _load("cache_sim")
prefetch = _load("cache_prefetch")


def _trace(forwards, L: int, E: int):
    """forwards: [(is_decode, [[flat ids of layer l] for l in range(L)])]."""
    steps = [(dec, layer, ids) for dec, layers in forwards for layer, ids in enumerate(layers)]
    return sim.Trace(E, L, steps, sum(dec for dec, _ in forwards), "hand-made")


def _random_trace(seed: int, L=3, E=6, k=2, n_decode=30, prefill_tokens=4):
    rng = random.Random(seed)
    tok = lambda layer: [layer * E + e for e in rng.sample(range(E), k)]
    pre = (False, [[i for _ in range(prefill_tokens) for i in tok(layer)] for layer in range(L)])
    return _trace(
        [pre] + [(True, [tok(layer) for layer in range(L)]) for _ in range(n_decode)], L, E
    )


CYCLIC = _trace([(True, [[0, 1, 2], [3, 4, 5]])] * 6, 2, 6)  # LRU's worst case at small sizes


@pytest.mark.parametrize("prefill", ["warm", "skip"])
@pytest.mark.parametrize("seed", range(4))
def test_belady_never_misses_more_than_lru_fill(seed, prefill):
    for trace in (_random_trace(seed), CYCLIC):
        for S in range(1, trace.num_ids + 1):
            bel = sim.replay_belady(trace, S, prefill)
            lru = sim.replay_lru(trace, S, "fill", prefill=prefill)
            assert bel.distinct == lru.distinct
            assert bel.misses <= lru.misses, (seed, S)


def _compulsory(trace, prefill: str) -> int:
    seen, n = set(), 0
    for dec, _, ids in trace.steps:
        if dec:
            n += len(set(ids) - seen)
        if dec or prefill == "warm":
            seen |= set(ids)
    return n


@pytest.mark.parametrize("prefill", ["warm", "skip"])
def test_full_cache_has_only_compulsory_misses(prefill):
    trace = _random_trace(1)
    S = sim.slots_for(trace, 1.0)
    assert S == trace.num_ids
    want = _compulsory(trace, prefill)
    assert sim.replay_lru(trace, S, "fill", prefill=prefill).misses == want
    assert sim.replay_belady(trace, S, prefill).misses == want


def test_static_sets_with_every_slot_never_miss():
    trace = _random_trace(2)
    S = trace.num_ids
    for per_layer in (False, True):
        for source in ("trace", "prefill", "decode"):
            hot = sim.static_set(trace, S, source, per_layer)
            assert len(hot) == S
            assert sim.replay_static(trace, hot).misses == 0


def test_static_per_layer_split_and_choice():
    # layer 0 routes expert 1 most, layer 1 routes expert 3 (flat 4 + 3 = 7) most; 3 slots, 2 layers
    trace = _trace([(True, [[1, 1, 2], [7, 7, 5]]), (True, [[1, 2], [7, 6]])], 2, 4)
    assert sim.static_set(trace, 3, "trace", per_layer=True) == {
        1,
        2,
        7,
    }  # layer 0: 2 slots, layer 1: 1
    assert sim.static_set(trace, 2, "trace") == {1, 7}


@pytest.mark.parametrize("m,ratio", [(1, 0.1), (5, 0.3), (5, 0.5), (8, 0.5), (7, 0.68), (6, 2.0)])
def test_hybrid_cpu_fraction_follows_q_rule(m, ratio):
    trace = _trace([(True, [list(range(m))])], 1, 16)
    res = sim.replay_lru(trace, 16, "hybrid", ratio)
    q = max(1, min(m, int(m * ratio + 0.5)))  # the engine rounds half up (5 * 0.5 -> 3)
    assert res.per_step == [(m, m, q)]
    assert res.cpu_fraction == pytest.approx((m - q) / m)


def test_synthetic_trace_shape():
    t = sim.synthetic_trace(layers=3, experts=10, top_k=2, decode_steps=5, prefill_tokens=4, seed=1)
    assert t.decode_tokens == 5 and len(t.steps) == 3 * 6
    assert all(len(ids) == (2 if dec else 8) for dec, _, ids in t.steps)
    assert all(layer * 10 <= i < (layer + 1) * 10 for _, layer, ids in t.steps for i in ids)


def test_recorded_trace_formats(tmp_path):
    """The two formats of ../shared/traces (OLMoE .npz rows per token and layer; Mixtral per-token-layer JSON
    lines, incomplete tokens skipped, regrouped from layer-major order) load as decode layer steps in token
    order with flat ids layer * E + e; --domain keeps one part."""
    import json

    import numpy as np

    L, E = 2, 4
    ids = np.array(
        [[0, 1], [2, 3], [1, 2], [0, 3], [3, 0], [1, 1]], dtype=np.int16
    )  # 3 tokens x 2 layers
    np.savez(
        tmp_path / "t.npz",
        layer_index=np.array([0, 1] * 3, dtype=np.int16),
        requested_expert_ids=ids,
        domain_id=np.array([0, 0, 1, 1, 0, 0], dtype=np.int8),
        sequence_id=np.zeros(6, dtype=np.int32),
    )
    t = sim.load_trace(str(tmp_path / "t.npz"))
    assert (t.num_layers, t.num_experts, t.decode_tokens) == (L, E, 3)
    assert t.steps[:2] == [(True, 0, [0, 1]), (True, 1, [6, 7])]
    g = sim.load_trace(str(tmp_path / "t.npz"), "general")
    assert g.decode_tokens == 2 and g.steps[2] == (True, 0, [3, 0])
    rows = [
        {"dataset": "a", "problem_id": 0, "layer": lay, "experts": [lay, 3], "token_idx": tok}
        for lay in range(2)
        for tok in range(3)
    ]  # layer-major, as recorded
    rows = [r for r in rows if not (r["token_idx"] == 2 and r["layer"] == 1)]  # token 2 incomplete
    rows.append({"dataset": "b", "problem_id": 0, "layer": 0, "experts": [1, 2], "token_idx": 0})
    rows.append({"dataset": "b", "problem_id": 0, "layer": 1, "experts": [0, 2], "token_idx": 0})
    (tmp_path / "x_routing.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    t = sim.load_trace(str(tmp_path))
    assert (t.num_layers, t.num_experts, t.decode_tokens) == (2, 4, 3)
    assert [s[2] for s in t.steps[:4]] == [[0, 3], [5, 7], [0, 3], [5, 7]]
    assert sim.load_trace(str(tmp_path / "x_routing.jsonl"), "b").steps == [
        (True, 0, [1, 2]),
        (True, 1, [4, 6]),
    ]


def _reuse_model(trace, S, shift=4, one=1 << 16):
    """ExpertCache's "reuse" victim policy written plainly (dicts and loops), every miss filled: per id p (units of
    2^-16) moves 2^-shift of the way to 1 or 0 at each visit of its layer; misses (most routed first, ties by id)
    go to the free slots with the largest (d + L (1/p - 1)), empty slots first, ties to the lower slot."""
    E, L = trace.num_experts, trace.num_layers
    p = [0] * trace.num_ids
    slot_id, last = [-1] * S, [-1] * S
    where, out = {}, []
    for clock, (dec, layer, ids) in enumerate(trace.steps, start=1):
        counts = Counter(ids)
        for e in range(layer * E, (layer + 1) * E):
            p[e] += (one >> shift if e in counts else 0) - (p[e] >> shift)
        for i in counts:
            if i in where:
                last[where[i]] = clock
        miss = sorted((i for i in counts if i not in where), key=lambda i: (-counts[i], i))

        def wait(s):
            if slot_id[s] < 0:
                return float("inf")
            d = (slot_id[s] // E - layer - 1) % L + 1
            return d * one + L * (one * one // max(p[slot_id[s]], 1) - one)

        free = [s for s in range(S) if last[s] != clock]
        victims = sorted(free, key=lambda s: (-wait(s), s))[: len(miss)]
        for i, s in zip(miss, victims):
            where.pop(slot_id[s], None)
            slot_id[s], last[s], where[i] = i, clock, s
        if dec:
            out.append(len(miss))
    return out


def _nextuse_model(trace, S, shift=4, one=1 << 16, nu_d=1 << 10):
    """ExpertCache's "nextuse" victim policy written plainly (dicts and loops), fill: per id p (as reuse),
    q1 = the same moving average counted only at visits right after one it was routed at, and whether it
    was routed at its layer's last visit. An id whose layer runs in d steps keys
    nu = (1 - q1') (1 - p) [(1 - p) again when 2 d <= L] (q1' = q1 if routed last visit, else p), as
    nu * 2^10 + d; misses (d = L) in order of their key, then id, take the free slots of largest key
    (empty first, ties to the lower slot) while their key is below the slot's; the rest stay out."""
    E, L = trace.num_experts, trace.num_layers
    p, again, was = [0] * trace.num_ids, [0] * trace.num_ids, [0] * trace.num_ids
    slot_id, last = [-1] * S, [-1] * S
    where, out = {}, []

    def key(i, d):
        q1 = again[i] if was[i] == 1 else p[i]
        nu = ((one - q1) * (one - p[i])) >> 16
        if 2 * d <= L:
            nu = (nu * (one - p[i])) >> 16
        return nu * nu_d + d

    for clock, (dec, layer, ids) in enumerate(trace.steps, start=1):
        counts = Counter(ids)
        for e in range(layer * E, (layer + 1) * E):
            inc = one >> shift if e in counts else 0
            again[e] += was[e] * (inc - (again[e] >> shift))
            was[e] = int(e in counts)
            p[e] += inc - (p[e] >> shift)
        for i in counts:
            if i in where:
                last[where[i]] = clock
        miss = sorted((i for i in counts if i not in where), key=lambda i: (key(i, L), i))

        def slot_key(s):
            if slot_id[s] < 0:
                return float("inf")
            return key(slot_id[s], (slot_id[s] // E - layer - 1) % L + 1)

        free = [s for s in range(S) if last[s] != clock]
        victims = sorted(free, key=lambda s: (-slot_key(s), s))
        for i, s in zip(miss, victims):
            if not key(i, L) < slot_key(s):
                break  # admission: this miss and the rest run on the CPU
            where.pop(slot_id[s], None)
            slot_id[s], last[s], where[i] = i, clock, s
        if dec:
            out.append(len(miss))
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("victim,model", [("reuse", _reuse_model), ("nextuse", _nextuse_model)])
def test_replay_equals_a_plain_model(victim, model, seed):
    """The benchmark replays the engine's own ExpertCache; on small traces its reuse and nextuse (the
    default) policies miss exactly where a plain-Python model of the policy does, step by step, at
    sizes below one layer's experts and above."""
    trace = _random_trace(seed, L=4, E=8, k=3, n_decode=40)
    for S in (2, 5, 9, 16, 31):
        res = sim.replay_lru(trace, S, "fill", prefill="warm", victim=victim)
        assert [m for _, m, _ in res.per_step] == model(trace, S), (victim, seed, S)


def test_reuse_beats_lru_where_lru_cycles():
    """Three layers routing the same two experts each, four slots: LRU evicts exactly the layer that runs next
    (every id misses); reuse evicts from the layer that runs last, so the next one hits (2 misses in 3)."""
    trace = _trace([(True, [[0, 1], [2, 3], [4, 5]])] * 8, 3, 2)
    lru = sim.replay_lru(trace, 4, "fill", victim="lru")
    reuse = sim.replay_lru(trace, 4, "fill", victim="reuse")
    assert lru.miss_rate == 1.0 and reuse.miss_rate < 0.7, (lru.miss_rate, reuse.miss_rate)
    assert sim.replay_belady(trace, 4, "warm").misses <= reuse.misses


@pytest.mark.parametrize("seed", [0, 1])
def test_prefetch_off_is_the_reuse_replay(seed):
    """A prefetch of 0 experts replays exactly what reuse_fill does."""
    t = _random_trace(seed, L=4, E=8, k=2, n_decode=40)
    S = sim.slots_for(t, 0.25)
    pf, reuse = prefetch.replay_prefetch(t, S, 0), sim.replay_lru(t, S, "fill", victim="reuse")
    assert pf.per_step == reuse.per_step and pf.prefetched == 0


def test_prefetch_learns_a_layer_to_layer_rule():
    """Each token's experts at layer l + 1 follow from those at layer l (e -> e + 1 mod E), the first layer's at
    random: once NextLayerGuess has seen the rule, every expert of layers >= 1 was fetched before its layer ran
    (nearly every prefetch used), so only layer 0 still misses; without prefetch the small cache misses throughout."""
    L, E, k = 4, 16, 2
    rng = random.Random(0)
    forwards = []
    for _ in range(200):
        first = rng.sample(range(E), k)
        forwards.append(
            (True, [[layer * E + (e + layer) % E for e in first] for layer in range(L)])
        )
    t = _trace(forwards, L, E)
    S = 2 * k  # room for one layer step and one prefetch
    pf, plain = prefetch.replay_prefetch(t, S, k), sim.replay_lru(t, S, "fill", victim="reuse")
    late = slice(len(pf.per_step) // 2, None)  # the second half: the rule learned
    miss_layer = [
        sum(m for (_, m, _), i in zip(pf.per_step[late], range(10**9)) if i % L == layer)
        for layer in range(L)
    ]
    assert miss_layer[0] > 0 and miss_layer[1:] == [0] * (L - 1)
    assert sum(m for _, m, _ in plain.per_step[late]) > 3 * miss_layer[0]
    assert pf.used >= 0.9 * pf.prefetched > 0
