"""ExpertCache: S device slots, each holding every bank row of one flat expert id; one global LRU
across all MoE layers (DESIGN §3). This file holds the tables and the per-layer control step as a
torch reference (vectorised, no host synchronisation in the math; a Triton twin comes later).

Tables (on the cache's device):
  slot_of_id [N] int64   slot holding flat id n, or -1
  id_of_slot [S] int64   flat id in slot s, or -1 (empty)
  last_use   [S] int64   clock of the last layer step that used slot s (-1: never)
Legend: R = routes of one layer step, N = flat ids (MoE layers x E), S = slots.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ft_core.experts.bank import ExpertBank


@dataclass
class ControlResult:
    route_slot: torch.Tensor  # [R] slot serving each route, -1: computed on the CPU
    copy_ids: torch.Tensor  # [q] flat ids to copy host -> device
    copy_slots: torch.Tensor  # [q] their destination slots
    hits: int
    misses: int  # distinct ids routed and not resident (m)
    evictions: int


class ExpertCache:
    """Slot storage (same layout and dtype as the host bank) plus the LRU tables."""

    def __init__(self, bank: ExpertBank, slots: int, device: str = "cpu"):
        if slots < 1:
            raise ValueError(f"expert cache needs at least 1 slot, got {slots}")
        self.bank, self.num_slots, self.device = bank, min(slots, bank.num_ids), device
        S = self.num_slots
        self.store = {k: torch.empty((S, *t.shape[1:]), dtype=t.dtype, device=device) for k, t in bank.tensors.items()}
        self.slot_of_id = torch.full((bank.num_ids,), -1, dtype=torch.int64, device=device)
        self.id_of_slot = torch.full((S,), -1, dtype=torch.int64, device=device)
        self.last_use = torch.full((S,), -1, dtype=torch.int64, device=device)
        self.pinned = torch.zeros(S, dtype=torch.bool, device=device)
        self.clock = 0

    def slot_bank(self) -> ExpertBank:
        """An ExpertBank view whose flat ids are slots (for backends computing the device routes)."""
        b = self.bank
        return dataclasses.replace(b, tensors=self.store, _kernel_views=None)  # every field but the tensors

    def control(self, ids: torch.Tensor, q_of_m) -> ControlResult:
        """One layer step: look up ``ids`` [R], fill ``q_of_m(m)`` of the m missing ids into the least
        recently used unpinned slots not used in this step, and rewrite every route to a slot or -1.
        Mutates the tables; the caller copies ``copy_ids`` -> ``copy_slots`` before computing."""
        self.clock += 1
        uniq, counts = torch.unique(ids, return_counts=True)
        slot = self.slot_of_id[uniq]
        hit = slot >= 0
        self.last_use[slot[hit]] = self.clock
        miss = uniq[~hit]
        if miss.numel():  # fill the most-routed misses first, ties by id
            order = torch.argsort(counts[~hit] * (self.bank.num_ids + 1) - miss, descending=True)
            miss = miss[order]
        m = int(miss.numel())
        free = (~self.pinned) & (self.last_use != self.clock)
        q = min(int(q_of_m(m)), m, int(free.sum()))
        # victims: least recently used first (empty slots have last_use -1), ties by slot index (stable sort)
        lu = torch.where(free, self.last_use, torch.iinfo(torch.int64).max)
        victims = torch.sort(lu, stable=True).indices[:q]
        old = self.id_of_slot[victims]
        evicted = old[old >= 0]
        self.slot_of_id[evicted] = -1
        fill = miss[:q]
        self.slot_of_id[fill] = victims
        self.id_of_slot[victims] = fill
        self.last_use[victims] = self.clock
        return ControlResult(self.slot_of_id[ids], fill, victims, int(hit.sum()), m, int(evicted.numel()))

    def copy_in(self, ids: torch.Tensor, slots: torch.Tensor) -> int:
        """Copy every bank row of ``ids`` into ``slots`` (one indexed copy per bank tensor). Returns bytes."""
        if ids.numel() == 0:
            return 0
        n = 0
        for k, t in self.bank.tensors.items():
            rows = t[ids.cpu()]
            self.store[k][slots] = rows.to(self.device, non_blocking=True)
            n += rows.numel() * rows.element_size()
        return n

    def resize(self, slots: int) -> dict:
        """Change the number of slots in place of a restart (DESIGN §5). Shrinking keeps the most recently
        used entries that fit (pinned ones first); growing keeps everything. Slot storage is rebuilt, so
        callers must refresh views of it (``slot_bank()``). Returns {"slots", "kept", "dropped"}."""
        if slots < 1:
            raise ValueError(f"expert cache needs at least 1 slot, got {slots}")
        S2 = min(slots, self.bank.num_ids)
        occ = torch.nonzero(self.id_of_slot >= 0).flatten()
        # keep order: pinned first, then most recently used; ties by slot index
        rank = self.last_use[occ] + self.pinned[occ].to(torch.int64) * (1 << 62)
        keep = occ[torch.sort(-rank, stable=True).indices][:S2]
        keep = torch.sort(keep).values  # stable slot order among survivors
        store = {k: torch.empty((S2, *t.shape[1:]), dtype=t.dtype, device=self.device) for k, t in self.store.items()}
        n = keep.numel()
        for k, t in self.store.items():
            store[k][:n] = t[keep]
        ids = self.id_of_slot[keep]
        self.slot_of_id.fill_(-1)
        self.slot_of_id[ids] = torch.arange(n, device=self.device)
        self.id_of_slot = torch.full((S2,), -1, dtype=torch.int64, device=self.device)
        self.id_of_slot[:n] = ids
        last_use = torch.full((S2,), -1, dtype=torch.int64, device=self.device)
        last_use[:n] = self.last_use[keep]
        pinned = torch.zeros(S2, dtype=torch.bool, device=self.device)
        pinned[:n] = self.pinned[keep]
        dropped = int(occ.numel()) - n
        self.store, self.last_use, self.pinned, self.num_slots = store, last_use, pinned, S2
        return {"slots": S2, "kept": n, "dropped": dropped}

    def check(self) -> None:
        """Table invariants (tests): the two maps are inverse, slots hold what they say."""
        occ = self.id_of_slot >= 0
        assert torch.equal(self.slot_of_id[self.id_of_slot[occ]], torch.nonzero(occ).flatten())
        assert int((self.slot_of_id >= 0).sum()) == int(occ.sum())
