"""Timing model of the MoE miss split (DESIGN §3), shared by the ``auto`` policy and the benchmarks.

One layer step routes ``d`` distinct experts of ``b`` bytes each; ``m`` of them miss the cache and the
policy fills ``q`` over PCIe (B_P bytes/s) while the host computes the other ``m - q`` (B_H bytes/s)
concurrently. Hits compute on the device and are taken as free (they read device memory, an order of
magnitude faster than either link). Seconds per layer step:

    cpu     d * b / B_H + h                    no cache, every routed expert on the host
    static  m * b / B_H + c + s                frozen hot set; its misses on the host
    fill    m * b / B_P + s                    every miss copied in
    hybrid  max(q * b / B_P, (m - q) * b / B_H) + c + s,  q = hybrid_q(m, B_P / B_H)

``c`` is the fixed cost of a step that splits its routes between device and host (the "CPU branch"):
queueing the device work, waiting for it and adding the partial sums -- ``ft probe``'s ``branch_us``
(probe.branch_seconds), charged when m - q > 0. FreeToken's own tracker shows its split losing to
plain offload on a 4090 (12.75 vs 14.90 tok/s) for want of this term. ``s`` and ``h`` are the fixed
costs of a whole layer step through the expert cache (the step the engine runs: on a GPU the queued
one, control, fills and slot GEMM replayed from graphs) and through the CPU-only path with the dense
layers on the GPU (x down, y up): ``ft probe``'s ``cached_step_us`` and ``host_step_us``
(probe.step_costs). On an H200 the cache's older read-back step measured ~0.5 ms a layer step slower
than CPU-only at equal bytes, which bytes alone did not predict, and ``auto`` picked fill where
CPU-only was faster.
"""

from __future__ import annotations

POLICIES = ("cpu", "static", "fill", "hybrid")


def hybrid_q(m: int, ratio: float) -> int:
    """Fills for ``m`` misses at ratio B_P / B_H: round(m * ratio) half up, at least one when m >= 1."""
    return 0 if m <= 0 else max(1, min(m, int(m * ratio + 0.5)))


def step_seconds(
    policy: str,
    d: float,
    m: float,
    q: float,
    b: float,
    bp: float | None,
    bh: float,
    branch_s: float = 0.0,
    cached_s: float = 0.0,
    host_s: float = 0.0,
) -> float | None:
    """Predicted seconds of one layer step (see the module docstring); None when the policy needs a device
    (``bp`` None) that this machine lacks. ``branch_s``, ``cached_s``, ``host_s``: the fixed costs c, s
    and h."""
    if policy == "cpu":
        return d * b / bh + host_s
    if bp is None:
        return None
    c = branch_s if m - q > 0 else 0.0  # static: q = 0
    if policy == "static":
        return m * b / bh + c + cached_s
    if policy == "fill":
        return m * b / bp + cached_s
    if policy == "hybrid":
        return max(q * b / bp, (m - q) * b / bh) + c + cached_s
    raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")


def choose_policy(
    bp: float | None,
    bh: float,
    expert_bytes: float,
    distinct: float,
    miss_rate: float,
    branch_s: float = 0.0,
    cached_s: float = 0.0,
    host_s: float = 0.0,
) -> tuple[str, dict]:
    """The ``auto`` policy: the fastest of cpu / fill / hybrid under the model for a layer step with
    ``distinct`` routed experts of which a fraction ``miss_rate`` misses (e.g. 1 - cache fraction for
    uniform routing). Returns (policy, {policy: seconds}). It never returns a policy predicted slower
    than ``fill`` or ``cpu``; without a device (``bp`` None) it is ``cpu``. ``static`` is not a
    candidate: its hot set needs a routing profile first. ``branch_s``, ``cached_s``, ``host_s``: the
    fixed costs of a split step, of a step through the cache and of a CPU-only step (module docstring)."""
    m = distinct * miss_rate
    times = {"cpu": step_seconds("cpu", distinct, m, 0, expert_bytes, bp, bh, host_s=host_s)}
    if bp is not None:
        times["fill"] = step_seconds(
            "fill", distinct, m, m, expert_bytes, bp, bh, cached_s=cached_s
        )
        # Expected q of the rounded rule, evaluated at the expected m (whole misses, at least one).
        mi = max(1, round(m)) if m > 0 else 0
        q = hybrid_q(mi, bp / bh)
        split = step_seconds("hybrid", distinct, mi, q, expert_bytes, bp, bh)
        times["hybrid"] = (
            split * (m / mi if mi else 0) + (branch_s if mi - q > 0 else 0.0) + cached_s
        )
    best = min(times, key=lambda p: (times[p], ("hybrid", "fill", "cpu").index(p)))
    return best, times


# The default victim policy's (nextuse) miss rate on trained routing, by cache fraction of all experts:
# OLMoE-1B-7B greedy decode (the general half of ../shared/traces/olmoe_decode_general_code.npz, one
# global cache over its 16 x 64 experts; benchmarks/bench_cache_policies.py --trace). The code half
# misses less (0.511 / 0.276 / 0.166 / 0.089 at 11 / 25 / 37 / 50 %); a full cache only at warm-up.
NEXTUSE_MISS = ((0.0, 1.0), (0.11, 0.594), (0.25, 0.371), (0.37, 0.254), (0.5, 0.160), (1.0, 0.0))


def expected_miss_rate(cache_fraction: float) -> float:
    """The share of a decode step's distinct routed experts that miss a cache holding
    ``cache_fraction`` of all experts: NEXTUSE_MISS, linearly interpolated (clamped to [0, 1])."""
    f = min(1.0, max(0.0, cache_fraction))
    for (f0, m0), (f1, m1) in zip(NEXTUSE_MISS, NEXTUSE_MISS[1:]):
        if f <= f1:
            return m0 + (m1 - m0) * (f - f0) / (f1 - f0)
    return 0.0


def slots_for_free_memory(
    free_bytes: int, slot_bytes: int, num_ids: int, reserve_bytes: int = 0, fraction: float = 0.9
) -> int:
    """Cache slots for ``auto`` sizing: whole slots in ``fraction`` of the device's free memory after
    ``reserve_bytes`` (KV pages, activations), at most one per expert id, at least 0."""
    room = int((free_bytes - reserve_bytes) * fraction)
    return max(0, min(num_ids, room // max(1, slot_bytes)))


def auto_policy(
    probe: dict, expert_bytes: float, top_k: int, cache_fraction: float
) -> tuple[str, float | None, dict]:
    """``moe_backend="auto"`` on a device: (policy, B_P / B_H for hybrid or None, predicted seconds)
    from a probe record (experts/probe.py: GB/s and microseconds) for one decode token's layer step
    (``top_k`` distinct experts) with a cache of ``cache_fraction`` of all experts. The miss rate is
    the default policy's on trained routing (``expected_miss_rate``; uniform routing, as in
    random-weight test models, misses more: 1 - cache_fraction). B_H is the one measured while a copy
    runs when there is one (fills and CPU routes share the memory bus)."""
    bp = probe.get("B_P")
    bh = probe.get("B_H_during_copy") or probe["B_H"]
    us = lambda k: (probe.get(k) or 0.0) * 1e-6  # noqa: E731  (absent in older records: 0)
    policy, times = choose_policy(
        None if bp is None else bp * 1e9,
        bh * 1e9,
        expert_bytes,
        top_k,
        expected_miss_rate(cache_fraction),
        us("branch_us"),
        us("cached_step_us"),
        us("host_step_us"),
    )
    return policy, (bp / bh if policy == "hybrid" else None), times
