"""The Triton cache-control kernel (run by Triton's interpreter on the CPU) against the torch control
step of ft_core's ExpertCache, for every victim policy (lru, reuse, nextuse): same route slots, copy
list and tables (the policies' statistics too), step after step, nextuse's admission refusing misses, including ties, duplicate routes, m = 0, q = m, a
cache smaller than one layer's routes, and prefetch steps that are not observed."""

import os
import subprocess
import sys

import pytest

CODE = r"""
import random, torch
from ft_core.experts.bank import ExpertBank
from ft_core.experts.cache import ExpertCache
from ft_core.experts.cached import q_policy
from ft_kernels.gpu.cache_control import control

def bank(n, E=None):
    b = ExpertBank("bf16", num_experts=E or n, hidden=2, inter=1, act="swiglu")
    b.tensors["w13"] = torch.zeros(n, 2, 2, dtype=torch.bfloat16); b.tensors["w2"] = torch.zeros(n, 2, 1, dtype=torch.bfloat16)
    return b

rng = random.Random(0)
cases = refused = 0
CASES = [(24, 1, "fill", 1.0), (24, 5, "fill", 1.0), (40, 12, "hybrid", 0.3), (40, 12, "hybrid", 2.0), (16, 16, "fill", 1.0),
         (30, 7, "cpu", 1.0), (300, 260, "hybrid", 0.5)]
for victims in ("lru", "reuse", "nextuse"):
    for n_ids, slots, mode, ratio in CASES:
        E = {24: 8, 40: 10, 16: 4, 30: 6, 300: 20}[n_ids] if victims != "lru" else n_ids  # L = n_ids / E layers
        L = n_ids // E
        ref = ExpertCache(bank(n_ids, E), slots, policy=victims)
        ref.pinned[: slots // 4] = slots >= 8  # some pinned slots on the larger caches
        t = {k: getattr(ref, k).clone().to(DEV) for k in ("slot_of_id", "id_of_slot", "last_use", "pinned", "reuse", "again", "routed")}
        qf = q_policy(mode, ratio) if mode != "cpu" else (lambda m: 0)
        for step in range(30 if victims != "nextuse" else 80):  # nextuse: rates that differ
            R = rng.choice([0, 1, 3, 8, 17])
            base = (step % L) * E  # one layer a step, in the layer cycle (LRU: any ids)
            pick = (lambda: rng.randrange(E) + base) if victims != "lru" else (lambda: rng.randrange(n_ids))
            ids = torch.tensor([pick() for _ in range(R)] if step % 5 else [base + rng.randrange(min(4, E)) for _ in range(R)],
                               dtype=torch.int64)
            observe = step % 7 != 3  # now and then a prefetch-like step
            want = ref.control(ids, qf, observe=observe)
            rs, ci, cs, nc = control(ids.to(DEV), t["slot_of_id"], t["id_of_slot"], t["last_use"], t["pinned"], ref.clock, mode, ratio,
                                     victims, t["reuse"], E, L, observe, t["again"], t["routed"])
            n = int(nc[0])
            assert nc[1:].tolist() == [want.hits, want.misses, want.evictions], (victims, step)
            assert rs.tolist() == want.route_slot.tolist(), (victims, step, rs, want.route_slot)
            assert ci[:n].tolist() == want.copy_ids.tolist() and cs[:n].tolist() == want.copy_slots.tolist(), (victims, step)
            for k in ("slot_of_id", "id_of_slot", "last_use", "reuse", "again", "routed"):
                assert torch.equal(t[k].cpu(), getattr(ref, k)), (victims, step, k)
            cases += 1
            untouched = int(((~ref.pinned) & (ref.last_use != ref.clock)).sum())  # free slots left
            refused += victims == "nextuse" and untouched > 0 and len(want.copy_ids) < min(qf(want.misses), want.misses)
assert refused > 0, "nextuse's admission never refused a miss: the test does not reach it"
print("ok", cases, refused)
"""


def _run(device: str, env: dict) -> None:
    code = f"DEV = {device!r}\n" + CODE
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0 and "ok" in res.stdout, (res.stdout[-2000:], res.stderr[-4000:])


def test_triton_control_matches_torch_control_under_interpreter():
    _run("cpu", {**os.environ, "TRITON_INTERPRET": "1"})


@pytest.mark.cuda
def test_triton_control_matches_torch_control_on_the_gpu():
    """The same steps compiled for the GPU (tables on CUDA, the torch twin on the host)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    _run("cuda", env)


HYPOTHESIS = r"""
import torch
from hypothesis import given, settings, strategies as st
from ft_core.experts.bank import ExpertBank
from ft_core.experts.cache import ExpertCache
from ft_core.experts.cached import q_policy
from ft_kernels.gpu.cache_control import control

@st.composite
def runs(draw):
    E, L = draw(st.integers(1, 12)), draw(st.integers(1, 5))
    slots = draw(st.integers(1, E * L))
    mode = draw(st.sampled_from(["fill", "hybrid", "cpu"]))
    ratio = draw(st.sampled_from([0.3, 0.5, 2.0]))
    steps = draw(st.lists(st.tuples(st.lists(st.integers(0, E - 1), max_size=12), st.booleans()), min_size=1, max_size=12))
    return E, L, slots, mode, ratio, steps, draw(st.sampled_from(["lru", "reuse", "nextuse"]))

@settings(max_examples=40, deadline=None)
@given(runs())
def check(run):
    E, L, slots, mode, ratio, steps, victims = run
    b = ExpertBank("f32", num_experts=E, hidden=2, inter=1, act="swiglu")
    b.tensors["w13"] = torch.zeros(E * L, 2, 2); b.tensors["w2"] = torch.zeros(E * L, 2, 1)
    ref = ExpertCache(b, slots, policy=victims)
    t = {k: getattr(ref, k).clone() for k in ("slot_of_id", "id_of_slot", "last_use", "pinned", "reuse", "again", "routed")}
    qf = q_policy(mode, ratio) if mode != "cpu" else (lambda m: 0)
    for i, (experts, observe) in enumerate(steps):
        ids = torch.tensor([(i % L) * E + e for e in experts], dtype=torch.int64)  # the layers in their cycle
        want = ref.control(ids, qf, observe=observe)
        rs, ci, cs, nc = control(ids, t["slot_of_id"], t["id_of_slot"], t["last_use"], t["pinned"], ref.clock, mode,
                                 ratio, victims, t["reuse"], E, L, observe, t["again"], t["routed"])
        assert rs.tolist() == want.route_slot.tolist()
        assert ci[:int(nc[0])].tolist() == want.copy_ids.tolist() and cs[:int(nc[0])].tolist() == want.copy_slots.tolist()
        assert nc[1:].tolist() == [want.hits, want.misses, want.evictions]
        for k in ("slot_of_id", "id_of_slot", "last_use", "reuse", "again", "routed"):
            assert torch.equal(t[k], getattr(ref, k)), k

check()
print("ok")
"""


def test_triton_control_matches_torch_control_on_generated_routing():
    """The same equality over hypothesis-generated caches and routing (layer and expert counts, slots, miss
    policies, victim policies, duplicate routes, empty steps, prefetch steps)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", HYPOTHESIS], env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0 and "ok" in res.stdout, (res.stdout[-2000:], res.stderr[-4000:])


def test_the_kernels_route_limit_is_the_caches():
    from ft_kernels.gpu.cache_control import MAX_ROUTES

    from ft_core.experts.cache import TRITON_MAX_ROUTES

    assert MAX_ROUTES == TRITON_MAX_ROUTES
