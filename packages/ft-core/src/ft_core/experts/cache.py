"""ExpertCache: S device slots, each holding every bank row of one flat expert id; one global cache
across all MoE layers (DESIGN §3). This file holds the tables and the per-layer control step as a
torch reference (vectorised; the Triton twin is ft_kernels/gpu/cache_control.py).

Victim policies (``POLICIES``):
  lru    the least recently used slot first.
  reuse  the slot whose expert is expected to be needed last: its layer's next visit is d layer steps away
         (1..L, the layers being visited in a cycle), and it is routed at a visit with probability p, a
         per-id moving average of "routed when its layer ran" (weight 2^-REUSE_SHIFT on the newest visit),
         so its expected next use is d + L (1/p - 1) steps away; evict the largest. Integer arithmetic
         (p in units of 2^-16), so any twin picks the same victims. On the OLMoE trace (16 x 64 experts,
         top-8, general half) it misses 0.63 / 0.41 / 0.17 against LRU's 1.00 / 0.47 / 0.21 at 11 / 25 / 50 %
         of the experts (first 2,000 tokens; benchmarks/bench_cache_policies.py).
  nextuse  the slot whose expert is least likely to be routed in its layer's next nv visits (those within
         the next 2.5 layer cycles: nv = 3 when its layer comes within half a cycle, else 2), nu =
         (1 - q1) (1 - p)^(nv - 1), where p is reuse's rate and q1 the rate of being routed again right
         after being routed (``again``, a moving average like p, kept per id) if the id was routed at its
         layer's last visit, else p; evict the largest nu (ties: the farther layer, then the lower slot).
         Admission: misses in order of their own nu (the one most likely needed again first) take the
         victims in order while their nu is below the victim's; the rest run on the CPU this step. Knobs:
         the horizon (2.5 cycles, ~2.5 tokens) and reuse's 2^-REUSE_SHIFT; integers throughout.

Tables (on the cache's device):
  slot_of_id [N] int64   slot holding flat id n, or -1
  id_of_slot [S] int64   flat id in slot s, or -1 (empty)
  last_use   [S] int64   clock of the last layer step that used slot s (-1: never)
  reuse      [N] int64   reuse's p per flat id, in units of 2^-16 (kept by reuse and nextuse)
  again      [N] int64   nextuse's q1: p of being routed at a visit right after one it was routed at
  routed     [N] int64   nextuse: 1 if the id was routed at its layer's last visit
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


POLICIES = ("lru", "reuse", "nextuse")
NU_D = 1 << 10  # nextuse's key: nu * NU_D + d (d <= layers < NU_D: ties go to the farther layer)
REUSE_ONE = 1 << 16  # p = 1
TRITON_MAX_ROUTES = (
    256  # = ft_kernels.gpu.cache_control.MAX_ROUTES (not imported: Triton loads lazily)
)
REUSE_SHIFT = 4  # p <- p - p / 16 + (routed ? 1/16 : 0) at each visit of the id's layer


class ExpertCache:
    """Slot storage (same layout and dtype as the host bank) plus the tables of the victim policy."""

    def __init__(
        self,
        bank: ExpertBank,
        slots: int,
        device: str = "cpu",
        policy: str = "lru",
        control_impl: str = "torch",
    ):
        if slots < 1:
            raise ValueError(f"expert cache needs at least 1 slot, got {slots}")
        if policy not in POLICIES:
            raise ValueError(f"expert cache policy {policy!r} is not one of {', '.join(POLICIES)}")
        self.bank, self.num_slots, self.device, self.policy = (
            bank,
            min(slots, bank.num_ids),
            device,
            policy,
        )
        S = self.num_slots
        self.store = {
            k: torch.empty((S, *t.shape[1:]), dtype=t.dtype, device=device)
            for k, t in bank.tensors.items()
        }
        self.slot_of_id = torch.full((bank.num_ids,), -1, dtype=torch.int64, device=device)
        self.id_of_slot = torch.full((S,), -1, dtype=torch.int64, device=device)
        self.last_use = torch.full((S,), -1, dtype=torch.int64, device=device)
        self.pinned = torch.zeros(S, dtype=torch.bool, device=device)
        self.reuse = torch.zeros(bank.num_ids, dtype=torch.int64, device=device)
        self.again = torch.zeros(bank.num_ids, dtype=torch.int64, device=device)
        self.routed = torch.zeros(bank.num_ids, dtype=torch.int64, device=device)
        if policy == "nextuse" and bank.num_ids // bank.num_experts >= NU_D:
            raise ValueError(f"nextuse keys hold at most {NU_D - 1} MoE layers")
        self.clock = 0
        self.clock_t = torch.zeros(1, dtype=torch.int64, device=device)  # the kernel reads it here
        self.inline_ticks = 0  # ticks queued on the device alone (``tick(inline=True)``)
        if control_impl not in ("torch", "triton"):
            raise ValueError(f"cache control {control_impl!r} is not one of torch, triton")
        self.control_impl = control_impl  # triton: ft_kernels.gpu.cache_control, this method's twin
        self._listed_copy: bool | None = None  # see listed_copy

    def slot_bank(self) -> ExpertBank:
        """An ExpertBank view whose flat ids are slots (for backends computing the device routes)."""
        b = self.bank
        return dataclasses.replace(
            b, tensors=self.store, _kernel_views=None
        )  # every field but the tensors

    def control(
        self, ids: torch.Tensor, q_of_m, observe: bool = True, mode: tuple[str, float] | None = None
    ) -> ControlResult:
        """One layer step: look up ``ids`` [R] (one MoE layer's flat ids), fill ``q_of_m(m)`` of the m missing
        ids into the unpinned slots not used in this step that the policy evicts first, and rewrite every route
        to a slot or -1. ``observe``: the step is real routing (False: a prefetch, which must not count as
        use in reuse's statistics). Mutates the tables; the caller copies ``copy_ids`` -> ``copy_slots``
        before computing. ``mode``: the same rule as (name, ratio) of the Triton kernel's modes (cpu, fill,
        hybrid); given, with ``control_impl`` "triton" and at most ``TRITON_MAX_ROUTES`` routes, the kernel
        runs the step (larger steps: this method, on the tables' device)."""
        self.clock += 1
        ids = ids.to(self.device)  # the tables live on the cache's device
        if self.control_impl == "triton" and mode is not None and ids.numel() <= TRITON_MAX_ROUTES:
            return self._control_triton(ids, mode, observe)
        uniq, counts = torch.unique(ids, return_counts=True)
        if observe and self.policy != "lru" and uniq.numel():
            self._observe(uniq)
        slot = self.slot_of_id[uniq]
        hit = slot >= 0
        self.last_use[slot[hit]] = self.clock
        miss = uniq[~hit]
        nu = None
        if miss.numel() and self.policy == "nextuse":  # the likeliest to be needed again first
            L = self.bank.num_ids // self.bank.num_experts
            nu = self._nu(miss, torch.full_like(miss, L))
            order = torch.argsort(nu * (self.bank.num_ids + 1) + miss)
            miss, nu = miss[order], nu[order]
        elif miss.numel():  # fill the most-routed misses first, ties by id
            order = torch.argsort(counts[~hit] * (self.bank.num_ids + 1) - miss, descending=True)
            miss = miss[order]
        m = int(miss.numel())
        free = (~self.pinned) & (self.last_use != self.clock)
        q = min(int(q_of_m(m)), m, int(free.sum()))
        victims, vkey = self._victims(free, uniq, q)
        if nu is not None and q:  # admission: a prefix of the misses, each below its victim's key
            below = (nu[:q] < vkey).to(torch.int64)
            q = int(below.cumprod(0).sum())
            victims = victims[:q]
        old = self.id_of_slot[victims]
        evicted = old[old >= 0]
        self.slot_of_id[evicted] = -1
        fill = miss[:q]
        self.slot_of_id[fill] = victims
        self.id_of_slot[victims] = fill
        self.last_use[victims] = self.clock
        return ControlResult(
            self.slot_of_id[ids], fill, victims, int(hit.sum()), m, int(evicted.numel())
        )

    def _control_triton(
        self, ids: torch.Tensor, mode: tuple[str, float], observe: bool
    ) -> ControlResult:
        """The step by ft_kernels.gpu.cache_control (the tables updated on the device); its counters come
        back in one read (the caller needs the routes on the host anyway)."""
        self.clock_t.fill_(self.clock)
        route_slot, copy_ids, copy_slots, counts = self.launch(ids, mode, observe)
        q, hits, misses, evicted = counts.tolist()  # the one read back of the step
        return ControlResult(route_slot, copy_ids[:q], copy_slots[:q], hits, misses, evicted)

    def control_queued(
        self, ids: torch.Tensor, mode: tuple[str, float], observe: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``control`` by the Triton kernel with nothing read back (``control_impl`` "triton", at most
        ``TRITON_MAX_ROUTES`` ids): (route_slot [R], copy_ids [Q], copy_slots [Q], counts [4] int32:
        copies, hits, misses, evictions) on the cache's device, queued behind the caller's work; the
        copy list's first counts[0] entries are valid (``copy_listed`` copies them)."""
        if self.control_impl != "triton" or ids.numel() > TRITON_MAX_ROUTES:
            raise ValueError(
                f"control_queued runs the Triton control kernel on at most {TRITON_MAX_ROUTES} "
                f"routes (control_impl {self.control_impl!r}, {ids.numel()} routes)"
            )
        self.tick()
        return self.launch(ids.to(self.device), mode, observe)

    def tick(self, inline: bool = False) -> None:
        """Advance the clock for a step the Triton kernel runs (``launch``), in ``clock_t`` too.
        ``inline`` (a whole decode step being captured, replayed later): ``clock_t`` advanced on the
        device (a value written now would be replayed as it is) and counted in ``inline_ticks``; the
        replaying caller advances ``clock`` by what each replay ticks."""
        if inline:
            self.clock_t.add_(1)
            self.inline_ticks += 1
            return
        self.clock += 1
        self.clock_t.fill_(self.clock)

    def launch(self, ids: torch.Tensor, mode: tuple[str, float], observe: bool):
        """The Triton control kernel on ``ids`` [R] (on the cache's device) at the clock ``clock_t``
        holds when it runs (``tick`` first): ``control_queued``'s outputs. Only stream work: a CUDA
        graph can capture it."""
        from ft_kernels.gpu.cache_control import control

        E = self.bank.num_experts
        return control(
            ids, self.slot_of_id, self.id_of_slot, self.last_use, self.pinned, self.clock_t, mode[0],
            mode[1], self.policy, self.reuse, E, self.bank.num_ids // E, observe, self.again,
            self.routed,
        )  # fmt: skip

    @property
    def listed_copy(self) -> bool:
        """Whether ``copy_listed`` can read the bank: slots in host memory, or a contiguous page-locked
        bank (which a GPU reads in place through its unified address)."""
        if self._listed_copy is None:
            ts = self.bank.tensors.values()
            self._listed_copy = all(t.is_contiguous() for t in ts) and (
                self.device == "cpu" or all(t.is_pinned() for t in ts)
            )
        return self._listed_copy

    def copy_listed(self, ids: torch.Tensor, slots: torch.Tensor, counts: torch.Tensor) -> None:
        """Copy every bank row of the first counts[0] ids [Q] into slots [Q] (the control kernel's list,
        on the cache's device) with ft_kernels' slot-copy kernel, which reads the count on the device:
        nothing waits on the host. Queued on the caller's stream. Needs ``listed_copy``."""
        from ft_kernels.gpu.slot_copy import copy_rows

        for k, t in self.bank.tensors.items():
            copy_rows(t, self.store[k], ids, slots, counts)

    def _observe(self, uniq: torch.Tensor) -> None:
        """reuse's statistics: every id of this step's layer moves 2^-REUSE_SHIFT of the way to 1 (routed) or 0;
        nextuse's ``again`` the same for the ids routed at the layer's previous visit, then ``routed``."""
        E = self.bank.num_experts
        base = (
            uniq[:1] // E * E
        )  # the step's layer: that of its lowest id (a step routes one layer's ids)
        block = base + torch.arange(E, device=self.device)
        routed = torch.zeros(E, dtype=torch.int64, device=self.device)
        own = uniq[uniq < base + E]
        routed[own - base] = REUSE_ONE >> REUSE_SHIFT
        if self.policy == "nextuse":
            was = self.routed[block]
            self.again[block] += was * (routed - (self.again[block] >> REUSE_SHIFT))
            self.routed[block] = (routed > 0).to(torch.int64)
        self.reuse[block] += routed - (self.reuse[block] >> REUSE_SHIFT)

    def _nu(self, ids: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """nextuse's key of flat ids [n] whose layer runs again in d [n] layer steps (1..L): the chance, in
        units of 2^-16, of not being routed in that layer's next nv visits, times NU_D, plus d."""
        L = self.bank.num_ids // self.bank.num_experts
        p = self.reuse[ids]
        q1 = torch.where(self.routed[ids] == 1, self.again[ids], p)
        nu = ((REUSE_ONE - q1) * (REUSE_ONE - p)) >> 16
        nu = torch.where(2 * d <= L, (nu * (REUSE_ONE - p)) >> 16, nu)  # nv = 3
        return nu * NU_D + d

    def _victims(
        self, free: torch.Tensor, uniq: torch.Tensor, q: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The q free slots the policy evicts first (empty ones first; ties: the lower slot), and their
        keys [q] (nextuse's admission compares them; an empty slot's is int64 max)."""
        if q == 0:  # every routed id resident (most decode steps of a warm cache): nothing to rank
            none = torch.zeros(0, dtype=torch.int64, device=self.device)
            return none, none
        big = torch.iinfo(torch.int64).max
        if self.policy == "lru":  # empty slots have last_use -1
            v = torch.sort(torch.where(free, self.last_use, big), stable=True).indices[:q]
            return v, self.last_use[v]
        E, L = self.bank.num_experts, self.bank.num_ids // self.bank.num_experts
        sid = self.id_of_slot
        layer = (
            uniq[:1] // E if uniq.numel() else torch.zeros(1, dtype=torch.int64, device=self.device)
        )
        d = (sid // E - layer - 1) % L + 1  # layer steps until the slot's layer runs again
        if self.policy == "nextuse":
            wait = self._nu(sid.clamp(min=0), d)
        else:
            p = self.reuse[sid.clamp(min=0)].clamp(min=1)
            wait = d * REUSE_ONE + L * (
                REUSE_ONE * REUSE_ONE // p - REUSE_ONE
            )  # (d + L (1/p - 1)) * 2^16
        key = torch.where(sid < 0, big, wait)
        key = torch.where(free, key, -1)
        v = torch.sort(key, descending=True, stable=True).indices[:q]
        return v, key[v]

    def copy_in(self, ids: torch.Tensor, slots: torch.Tensor) -> int:
        """Copy every bank row of ``ids`` into ``slots``. Returns bytes. In host memory: one indexed copy
        per bank tensor. To a GPU from a page-locked bank: one asynchronous copy per row (each row is
        contiguous, MBs long: DMA at link speed, queued on the current stream, no staging); from a
        pageable bank: gathered rows, then one copy per tensor (synchronous)."""
        if ids.numel() == 0:
            return 0
        n, ids_h, pairs = 0, ids.cpu(), None
        for k, t in self.bank.tensors.items():
            dst = self.store[k]
            if self.device != "cpu" and t.is_pinned():
                pairs = pairs or list(zip(ids_h.tolist(), slots.cpu().tolist()))
                for i, s in pairs:
                    dst[s].copy_(t[i], non_blocking=True)
                n += int(ids_h.numel()) * t[0].numel() * t.element_size()
                continue
            rows = t[ids_h]
            dst[slots] = rows.to(self.device, non_blocking=True)
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
        store = {
            k: torch.empty((S2, *t.shape[1:]), dtype=t.dtype, device=self.device)
            for k, t in self.store.items()
        }
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
