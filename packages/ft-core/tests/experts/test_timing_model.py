"""The timing model behind ``auto``: never a policy predicted slower than fill or cpu; sizing from free memory."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ft_core.experts.timing import choose_policy, hybrid_q, slots_for_free_memory, step_seconds


@settings(max_examples=300, deadline=None)
@given(
    bp=st.floats(0.5, 200),
    bh=st.floats(0.5, 300),
    d=st.integers(1, 64),
    miss=st.floats(0, 1),
    branch_us=st.floats(0, 5000),
    cached_us=st.floats(0, 5000),
    host_us=st.floats(0, 5000),
)
def test_auto_never_predicted_slower_than_fill_or_cpu(
    bp, bh, d, miss, branch_us, cached_us, host_us
):
    best, times = choose_policy(
        bp * 1e9, bh * 1e9, 9.4e6, d, miss, branch_us * 1e-6, cached_us * 1e-6, host_us * 1e-6
    )
    assert times[best] <= times["fill"] and times[best] <= times["cpu"]
    assert set(times) == {"cpu", "fill", "hybrid"}


def test_the_split_steps_fixed_cost_is_charged():
    """FreeToken's 4090 case: a split that wins on bandwidth alone loses once each layer step pays
    for queueing, waiting and merging its CPU branch; auto then fills every miss."""
    b, bp, bh = 9.4e6, 25e9, 63e9
    assert choose_policy(bp, bh, b, 8, 0.3)[0] == "hybrid"
    best, times = choose_policy(bp, bh, b, 8, 0.3, branch_s=600e-6)
    assert best == "fill" and times["hybrid"] > times["fill"]
    # the cost is charged only when some misses stay on the host
    assert step_seconds("hybrid", 8, 4, 4, 1e6, 1e9, 2e9, 1e-3) == 4e6 / 1e9
    assert step_seconds("hybrid", 8, 4, 2, 1e6, 1e9, 2e9, 1e-3) == max(2e6 / 1e9, 2e6 / 2e9) + 1e-3
    assert step_seconds("static", 8, 0, 0, 1e6, 1e9, 2e9, 1e-3) == 0


def test_auto_without_a_device_is_cpu():
    assert choose_policy(None, 20e9, 9.4e6, 8, 0.5) == ("cpu", {"cpu": 8 * 9.4e6 / 20e9})


def test_auto_picks_by_bandwidth():
    b = 9.4e6
    assert choose_policy(25e9, 63e9, b, 8, 0.3)[0] == "hybrid"  # the paper's 4090: split the misses
    assert choose_policy(500e9, 20e9, b, 8, 0.3)[0] in (
        "fill",
        "hybrid",
    )  # a fast link: (almost) all fills
    assert (
        choose_policy(0.001e9, 50e9, b, 8, 1.0)[0] == "cpu"
    )  # a link far too slow to be worth a cache


def test_hybrid_q_and_step_seconds():
    assert [hybrid_q(m, 0.4) for m in range(6)] == [0, 1, 1, 1, 2, 2]  # round half up, >= 1 fill
    assert hybrid_q(3, 5.0) == 3
    assert step_seconds("hybrid", 8, 4, 2, 1e6, 1e9, 2e9) == max(2e6 / 1e9, 2e6 / 2e9)
    assert step_seconds("fill", 8, 4, 4, 1e6, None, 2e9) is None


def test_slots_for_free_memory():
    assert slots_for_free_memory(10 * 2**30, 2**30, 100, reserve_bytes=2**30, fraction=1.0) == 9
    assert slots_for_free_memory(10 * 2**30, 2**30, 5) == 5  # never more slots than experts
    assert slots_for_free_memory(2**30, 2**31, 100) == 0


def test_auto_policy_reads_the_probe():
    """``auto`` on a device: the probe's GB/s and microseconds into choose_policy (B_H measured during a
    copy preferred); hybrid's ratio is B_P over that B_H."""
    from ft_core.experts.timing import auto_policy

    b = 9.4e6
    rec = {"B_H": 80.0, "B_H_during_copy": 63.0, "B_P": 25.0, "branch_us": 50.0}
    policy, ratio, times = auto_policy(rec, b, 8, 0.3)
    assert policy == "hybrid" and ratio == 25.0 / 63.0 and set(times) == {"cpu", "fill", "hybrid"}
    assert auto_policy({**rec, "branch_us": 2000.0}, b, 8, 0.3)[:2] == ("fill", None)
    assert auto_policy({"B_H": 20.0, "B_P": None}, b, 8, 0.5)[:2] == ("cpu", None)
    assert auto_policy({**rec, "B_P": 0.001}, b, 8, 0.5)[0] == "cpu"  # a link not worth a cache
    assert auto_policy({**rec, "branch_us": None}, b, 8, 1.0)[0] in (
        "fill",
        "hybrid",
    )  # old records


def test_cache_slots_from_free_device_memory(demo_dir):
    """Without a size option, a GPU's cache takes whole slots in 90 % of its free memory after a
    reserve of 1 GiB + 10 %; a size option wins; too little memory is a clear error."""
    import pytest

    from ft_core import Engine, FTError
    from ft_core.config import EngineConfig
    from ft_core.experts.factory import cache_slots

    bank = Engine.from_pretrained(demo_dir).model.bank
    per, n = bank.nbytes_per_id(), bank.num_ids
    cfg = EngineConfig(model=None)
    free = (1 << 30) * 10 // 9 + 5 * per * 10 // 8  # room for ~5 slots after the reserve
    got = cache_slots(bank, cfg, free)
    assert got == min(n, int((free - (1 << 30) - free // 10) * 0.9) // per) and got >= 1
    assert cache_slots(bank, cfg, 1 << 40) == n  # never more slots than experts
    assert cache_slots(bank, cfg, None) == max(1, round(n * 0.5))  # the CPU stand-in's default
    assert cache_slots(bank, EngineConfig(model=None, moe_cache_slots=3), 1 << 40) == 3
    with pytest.raises(FTError, match="no room for one expert"):
        cache_slots(bank, cfg, 1 << 29)


def test_the_whole_steps_fixed_costs_are_charged():
    """The H200 case (gpu_check, 2026-12): B_P 53 GB/s, B_H 58 GB/s, 8 routed experts of 9.4 MB a layer
    step, 25 % cached. On bytes alone the cache wins; with its step ~1 ms dearer than the CPU-only
    path's (what the measured tok/s implied), CPU-only is faster and auto must say so."""
    from ft_core.experts.timing import auto_policy

    b, rec = 9.4e6, {"B_H": 58.0, "B_H_during_copy": 58.0, "B_P": 53.0, "branch_us": 80.0}
    assert auto_policy(rec, b, 8, 0.25)[0] in ("fill", "hybrid")
    slow = {**rec, "cached_step_us": 1400.0, "host_step_us": 300.0}
    policy, _, times = auto_policy(slow, b, 8, 0.25)
    assert policy == "cpu" and times["fill"] > times["cpu"]
    assert step_seconds("fill", 8, 4, 4, 1e6, 1e9, 2e9, cached_s=1e-3) == 4e6 / 1e9 + 1e-3
    assert step_seconds("cpu", 8, 4, 0, 1e6, 1e9, 2e9, host_s=1e-3) == 8e6 / 2e9 + 1e-3
    assert auto_policy({**rec, "cached_step_us": None}, b, 8, 0.25)[0] in ("fill", "hybrid")


def test_step_costs_run_the_engines_own_step_on_the_cpu_stand_in():
    """probe.step_costs through the CPU stand-in (``probe`` asks it only on a GPU, where
    tests/test_cuda_path.py runs it): the cache's step with every route a hit, and the CPU-only one."""
    from ft_core.experts.probe import step_costs

    cached_s, host_s = step_costs("cpu", steps=5)
    assert 0 < cached_s < 1 and 0 < host_s < 1


def test_auto_takes_the_default_policys_miss_rate_on_real_routing():
    """``auto`` charges the misses nextuse had on OLMoE's trained routing (NEXTUSE_MISS, interpolated),
    not 1 - cache fraction: at 50 % cached a decode step of 8 experts fills 8 x 0.160 of them."""
    import pytest

    from ft_core.experts.timing import NEXTUSE_MISS, auto_policy, expected_miss_rate

    for f, m in NEXTUSE_MISS:
        assert expected_miss_rate(f) == pytest.approx(m)
    grid = [expected_miss_rate(k / 100) for k in range(-5, 106)]
    assert all(a >= b for a, b in zip(grid, grid[1:])) and grid[0] == 1.0 and grid[-1] == 0.0
    assert expected_miss_rate(0.3) == pytest.approx(0.371 + (0.254 - 0.371) * 5 / 12)
    b, rec = 9.4e6, {"B_H": 80.0, "B_P": 25.0}
    times = auto_policy(rec, b, 8, 0.5)[2]
    assert times["fill"] == pytest.approx(8 * 0.160 * b / 25e9)
