"""Per-layer expert-cache control in one Triton program (no host synchronisation, graph-capturable).

For the routed flat ids of one MoE layer step it: dedups them and counts routes per id; looks them up
(``slot_of_id``); marks hits used now (``last_use[slot] = clock``); orders the m distinct misses by
(routes desc, id asc); computes q from the policy; picks the q least recently used unpinned slots not
used in this step (ties: lower slot); writes the copy list (id -> slot) and its count; updates the
tables; rewrites every route to its slot or -1 (computed on the CPU).

Policies (``mode``): 0 cpu (q = 0), 1 fill (q = m), 2 hybrid (q = clamp(floor(m * ratio + 1/2), 1, m)).
Victims (``policy``): "lru", the least recently used first; "reuse", the largest expected wait until next use,
d + L (1/p - 1) (d: layer steps until the slot's layer runs again, p: a per-id moving average of being routed,
updated here for the step's layer unless ``observe`` is False), in the integers ExpertCache defines;
"nextuse", the largest chance of not being routed in its layer's next visits (tables ``again`` and
``routed`` besides p; misses ordered by their own key and admitted while below their victim's).
Twin: ``ft_core.experts.cache.ExpertCache.control`` (torch), which it must match exactly.
Decode-sized: R <= MAX_ROUTES routes per step. The program holds [R, R] comparisons in registers, so
its compile time grows fast with the block (sm_90, one core: 16 routes ~1 s, 256 ~9 s, 1024 ~8 min);
larger steps (prefill) take the torch twin on the device.
Legend: R = routes, N = flat ids, S = slots.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MODES = {"cpu": 0, "fill": 1, "hybrid": 2}
MAX_ROUTES = 256  # routes of one layer step the kernel takes (32 decode tokens at top-8)
VICTIMS = {"lru": 0, "reuse": 1, "nextuse": 2}
# constants the kernel reads: Triton compiles only globals declared constexpr (the interpreter takes any)
INT64_MAX = tl.constexpr(2**63 - 1)
REUSE_ONE = tl.constexpr(1 << 16)  # = ft_core.experts.cache's (a test runs both twins)
REUSE_SHIFT = tl.constexpr(4)
NU_D = tl.constexpr(1 << 10)  # = ft_core.experts.cache's


# Triton compiles a variant per "is 1" / "divisible by 16" of each integer argument: R moves with the
# batch, so without this a decode would compile new variants (~1-9 s each) mid-run. The clock is read
# from device memory (``clock_ptr``), so a captured CUDA graph replays with the current clock.
@triton.jit(do_not_specialize=["R"])
def _control(
    ids_ptr,
    R,
    slot_of_id,
    id_of_slot,
    last_use,
    pinned,
    reuse,
    again,
    routed_ptr,
    S,
    E,
    L,
    clock_ptr,
    mode,
    ratio,
    policy,
    observe,
    route_slot,
    copy_ids,
    copy_slots,
    counts,
    BR: tl.constexpr,
    BS: tl.constexpr,
    BE: tl.constexpr,
):
    clock = tl.load(clock_ptr)
    r = tl.arange(0, BR)
    rm = r < R
    ids = tl.load(ids_ptr + r, mask=rm, other=-1)
    # dedup: the first occurrence of each id carries its route count
    eq = (ids[:, None] == ids[None, :]) & rm[:, None] & rm[None, :]
    earlier = eq & (r[None, :] < r[:, None])
    first = rm & (tl.sum(earlier.to(tl.int32), axis=1) == 0)
    count = tl.sum(eq.to(tl.int32), axis=1)
    layer = (
        tl.min(tl.where(rm, ids, INT64_MAX), axis=0) // E
    )  # the step's layer: that of its lowest id
    if policy >= 1:
        if (
            observe == 1
        ):  # reuse's statistics: the layer's ids move 1/16 of the way to 1 (routed) or 0
            e = layer * E + tl.arange(0, BE)
            em = tl.arange(0, BE) < E
            routed = tl.sum(((ids[None, :] == e[:, None]) & rm[None, :]).to(tl.int32), axis=1) > 0
            inc = tl.where(routed, REUSE_ONE >> REUSE_SHIFT, 0)
            if policy == 2:  # nextuse's again (ids routed at the previous visit), then routed
                was = tl.load(routed_ptr + e, mask=em, other=0)
                a = tl.load(again + e, mask=em, other=0)
                a = a + was * (inc - (a >> REUSE_SHIFT))
                tl.store(again + e, a, mask=em)
                tl.store(routed_ptr + e, routed.to(tl.int64), mask=em)
            p = tl.load(reuse + e, mask=em, other=0)
            p = p + inc - (p >> REUSE_SHIFT)
            tl.store(reuse + e, p, mask=em)
            tl.debug_barrier()
    slot = tl.load(slot_of_id + ids, mask=rm, other=-1)
    hit = first & (slot >= 0)
    tl.store(last_use + slot, tl.full([BR], 0, tl.int64) + clock, mask=hit)
    tl.debug_barrier()
    miss = first & (slot < 0)
    m = tl.sum(miss.to(tl.int32), axis=0)
    # rank of each miss in the fill order: routes desc, then id asc (nextuse: its key asc, then id)
    mkey = tl.zeros([BR], dtype=tl.int64)
    if policy == 2:  # a miss's layer runs again a full cycle later: d = L, nv = 2
        pm = tl.load(reuse + ids, mask=rm, other=0)
        qm = tl.where(
            tl.load(routed_ptr + ids, mask=rm, other=0) == 1,
            tl.load(again + ids, mask=rm, other=0),
            pm,
        )
        mkey = (((REUSE_ONE - qm) * (REUSE_ONE - pm)) >> 16) * NU_D + L
        before = (mkey[None, :] < mkey[:, None]) | (
            (mkey[None, :] == mkey[:, None]) & (ids[None, :] < ids[:, None])
        )
    else:
        before = (count[None, :] > count[:, None]) | (
            (count[None, :] == count[:, None]) & (ids[None, :] < ids[:, None])
        )
    rank = tl.sum((miss[:, None] & miss[None, :] & before).to(tl.int32), axis=1)
    q = m * 0
    if mode == 1:
        q = m
    if mode == 2:
        q = tl.minimum(
            tl.maximum((m.to(tl.float32) * ratio + 0.5).to(tl.int32), 1), m
        )  # floor(x + .5), x >= 0
    # free slots: unpinned and not used in this step
    nfree = 0
    for s0 in range(0, S, BS):
        s = s0 + tl.arange(0, BS)
        sm = s < S
        lu = tl.load(last_use + s, mask=sm, other=clock)
        pn = tl.load(pinned + s, mask=sm, other=1)
        nfree += tl.sum(((lu != clock) & (pn == 0) & sm).to(tl.int32), axis=0)
    q = tl.minimum(q, nfree)
    # q rounds: take the least recently used free slot (lowest index on ties), fill it with miss j;
    # nextuse admits miss j only while every miss before it was and its key is below the victim's
    go = q * 0 + 1
    admitted = q * 0
    evicted = q * 0
    for j in range(0, q):
        best_lu = tl.full([], INT64_MAX, tl.int64)
        best_s = tl.full([], -1, tl.int64)
        for s0 in range(0, S, BS):
            s = s0 + tl.arange(0, BS)
            sm = s < S
            lu = tl.load(last_use + s, mask=sm, other=clock)
            pn = tl.load(pinned + s, mask=sm, other=1)
            k = lu  # the smallest key goes first
            if policy == 1:  # minus the expected wait; empty slots before all
                sid = tl.load(id_of_slot + s, mask=sm, other=-1)
                d = ((sid // E - layer - 1) % L + L) % L + 1
                # (not ``p``: a name the statistics above gave another shape; Triton 3.6 refuses that)
                ps = tl.maximum(tl.load(reuse + tl.maximum(sid, 0), mask=sm, other=1), 1)
                wait = d * REUSE_ONE + L * (REUSE_ONE * REUSE_ONE // ps - REUSE_ONE)
                k = tl.where(sid < 0, -INT64_MAX, -wait)
            if policy == 2:  # minus nextuse's key; empty slots before all
                sv = tl.load(id_of_slot + s, mask=sm, other=-1)
                sc = tl.maximum(sv, 0)
                dv = ((sv // E - layer - 1) % L + L) % L + 1
                pv = tl.load(reuse + sc, mask=sm, other=0)
                qv = tl.where(
                    tl.load(routed_ptr + sc, mask=sm, other=0) == 1,
                    tl.load(again + sc, mask=sm, other=0),
                    pv,
                )
                nv = ((REUSE_ONE - qv) * (REUSE_ONE - pv)) >> 16
                nv = tl.where(2 * dv <= L, (nv * (REUSE_ONE - pv)) >> 16, nv)  # 3 visits ahead
                k = tl.where(sv < 0, -INT64_MAX, -(nv * NU_D + dv))
            key = tl.where((lu != clock) & (pn == 0) & sm, k, INT64_MAX)
            kmin = tl.min(key, axis=0)
            kidx = tl.min(tl.where(key == kmin, s, S + BS).to(tl.int64), axis=0)
            better = kmin < best_lu
            best_s = tl.where(better, kidx, best_s)
            best_lu = tl.where(better, kmin, best_lu)
        new_id = tl.sum(tl.where(miss & (rank == j), ids, 0), axis=0)
        if policy == 2:
            kmiss = tl.sum(tl.where(miss & (rank == j), mkey, 0), axis=0)
            go = go * (kmiss < -best_lu).to(tl.int32)
        ok = go == 1
        old = tl.load(id_of_slot + best_s)
        tl.store(slot_of_id + old, -1, mask=(old >= 0) & ok)
        tl.debug_barrier()
        tl.store(slot_of_id + new_id, best_s, mask=ok)
        tl.store(id_of_slot + best_s, new_id, mask=ok)
        tl.store(last_use + best_s, clock, mask=ok)
        tl.store(copy_ids + j, new_id, mask=ok)
        tl.store(copy_slots + j, best_s, mask=ok)
        admitted += go
        evicted += ((old >= 0) & ok).to(tl.int32)
        tl.debug_barrier()
    tl.store(counts, admitted)
    tl.store(counts + 1, tl.sum(hit.to(tl.int32), axis=0))
    tl.store(counts + 2, m)
    tl.store(counts + 3, evicted)
    tl.debug_barrier()
    out = tl.load(slot_of_id + ids, mask=rm, other=-1)
    tl.store(route_slot + r, out, mask=rm)


def control(
    ids: torch.Tensor,
    slot_of_id: torch.Tensor,
    id_of_slot: torch.Tensor,
    last_use: torch.Tensor,
    pinned: torch.Tensor,
    clock: int | torch.Tensor,
    mode: str,
    ratio: float = 1.0,
    victims: str = "lru",
    reuse: torch.Tensor | None = None,
    experts: int = 1,
    layers: int = 1,
    observe: bool = True,
    again: torch.Tensor | None = None,
    routed: torch.Tensor | None = None,
):
    """Run one control step in place on the tables (int64; pinned bool/uint8; ``clock`` the step's
    clock, or a [1] int64 tensor on the tables' device holding it (read when the kernel runs: what a
    captured graph needs); ``reuse`` [N] int64, the
    "reuse" victims' statistics, of ``layers`` MoE layers x ``experts`` ids, updated in place). Returns
    (route_slot [R] int64, copy_ids [R] int64, copy_slots [R] int64, counts [4] int32): the first
    counts[0] entries of the copy list are valid (a device-side count: no host sync needed); counts[1:]
    are the step's hits, misses (distinct ids not resident) and evictions, for one read back."""
    R, S = ids.numel(), id_of_slot.numel()
    if victims not in VICTIMS:
        raise ValueError(f"victims must be one of {', '.join(VICTIMS)}, got {victims!r}")
    n_ids = experts * layers
    if victims != "lru" and (reuse is None or reuse.numel() != n_ids):
        raise ValueError(
            f"victims {victims!r} needs reuse statistics of layers * experts = {n_ids} ids"
        )
    if victims == "nextuse" and any(t is None or t.numel() != n_ids for t in (again, routed)):
        raise ValueError(f"victims 'nextuse' needs again and routed tables of {n_ids} ids")
    if R > MAX_ROUTES:
        raise ValueError(f"cache control handles up to {MAX_ROUTES} routes per layer step, got {R}")
    dev = ids.device
    route_slot = torch.empty(R, dtype=torch.int64, device=dev)
    copy_ids = torch.full((max(R, 1),), -1, dtype=torch.int64, device=dev)
    copy_slots = torch.full((max(R, 1),), -1, dtype=torch.int64, device=dev)
    counts = torch.zeros(4, dtype=torch.int32, device=dev)
    if R == 0:
        return route_slot, copy_ids, copy_slots, counts
    BR = max(16, triton.next_power_of_2(R))
    dummy = torch.zeros(1, dtype=torch.int64, device=dev)
    if not isinstance(clock, torch.Tensor):
        clock = torch.full((1,), clock, dtype=torch.int64, device=dev)
    stats = reuse if reuse is not None else dummy
    _control[(1,)](
        ids.contiguous(),
        R,
        slot_of_id,
        id_of_slot,
        last_use,
        pinned.to(torch.uint8),
        stats,
        again if again is not None else dummy,
        routed if routed is not None else dummy,
        S,
        experts,
        layers,
        clock,
        MODES[mode],
        float(ratio),
        VICTIMS[victims],
        int(observe),
        route_slot,
        copy_ids,
        copy_slots,
        counts,
        BR=BR,
        BS=256,
        BE=max(16, triton.next_power_of_2(experts)),
    )
    return route_slot, copy_ids, copy_slots, counts
