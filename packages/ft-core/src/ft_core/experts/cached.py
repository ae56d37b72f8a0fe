"""The expert memory hierarchy as an ExpertBackend: routes whose expert is resident in the
ExpertCache run on the device slots, misses are filled (q of them, by the policy) or run on the
host bank; the two partial sums are added (DESIGN §2, §3). Counters per MoE layer.

Policies (``q`` = fills for m distinct missing ids in one layer step):
  fill    q = m
  hybrid  q = clamp(floor(m * B_P / B_H + 1/2), 1, m) for m >= 1   (B_P >= B_H degenerates to fill)
  static  a hot set chosen from the routing counts of the first forward, pinned; q = 0 after

Prefill (a call with >= PREFILL_TOKENS tokens, fill/hybrid policies) double-buffers when the cache
holds two full layers: every miss of layer l is filled, and while layer l computes, a copy thread
loads all experts of layer l+1 into slots chosen now (layer l's slots pinned meanwhile). The next
call waits for that copy first. ``overlap=False`` turns this off for comparison.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import torch

from ft_core.experts.backends import ExpertBackend
from ft_core.experts.bank import ExpertBank
from ft_core.experts.cache import ExpertCache
from ft_core.experts.timing import hybrid_q

POLICIES = ("fill", "hybrid", "static")
PREFILL_TOKENS = 16


def q_policy(name: str, ratio: float | None):
    if name == "fill":
        return lambda m: m
    if name == "hybrid":
        if ratio is None or ratio <= 0:
            raise ValueError(
                "the hybrid policy needs the bandwidth ratio B_P / B_H (moe_bandwidth_ratio) > 0"
            )
        return lambda m: hybrid_q(m, ratio)  # round half up, as the Triton control kernel
    return lambda m: 0  # static (after warm-up) and cpu


class CachedBackend(ExpertBackend):
    def __init__(
        self,
        cache: ExpertCache,
        policy: str,
        ratio: float | None,
        device_backend: ExpertBackend,
        host_backend: ExpertBackend,
        warmup_calls: int,
        overlap: bool = True,
    ):
        if policy not in POLICIES:
            raise ValueError(f"moe backend {policy!r} is not one of cpu, {', '.join(POLICIES)}")
        self.name = policy
        self.cache, self.policy = cache, policy
        self.q_of_m = q_policy(policy, ratio)
        self.device_backend, self.host_backend = device_backend, host_backend
        self.slot_bank = cache.slot_bank()
        self.warmup_calls = (
            warmup_calls  # static: calls (one per MoE layer) counted before freezing
        )
        self.calls = 0
        self.route_counts = torch.zeros(cache.bank.num_ids, dtype=torch.int64)
        self.stats: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.overlap = overlap
        self.num_layers = cache.bank.num_ids // cache.bank.num_experts
        self._copy: threading.Thread | None = None  # the prefetch of the next layer, if running

    def supports(self, bank: ExpertBank) -> bool:
        return self.host_backend.supports(bank) and self.device_backend.supports(self.slot_bank)

    def run(self, bank, x, tok, eid, gate):
        tok, eid = tok.long(), eid.long()  # the cache's tables are int64 (routers may give int32)
        layer = int(eid[0]) // bank.num_experts if eid.numel() else -1
        self._join()  # slot contents are complete only once a pending prefetch is done
        if self.policy == "static":
            self._static_step(eid)
        E = bank.num_experts
        prefill = (
            self.overlap
            and self.policy != "static"
            and x.shape[0] >= PREFILL_TOKENS
            and self.cache.num_slots >= 2 * E
        )
        res = self.cache.control(eid, (lambda m: m) if prefill else self.q_of_m)
        copied = self.cache.copy_in(res.copy_ids, res.copy_slots)
        if prefill and 0 <= layer < self.num_layers - 1:
            self._prefetch(layer + 1, res.route_slot)
        on_dev = res.route_slot >= 0
        y = torch.zeros(x.shape, dtype=torch.float32)
        s = self.stats[layer]
        t0 = time.perf_counter()
        if bool(on_dev.any()):
            y += self.device_backend.run(
                self.slot_bank, x, tok[on_dev], res.route_slot[on_dev], gate[on_dev]
            )
        t1 = time.perf_counter()
        if not bool(on_dev.all()):
            off = ~on_dev
            y += self.host_backend.run(bank, x, tok[off], eid[off], gate[off])
        s["device_us"] += int((t1 - t0) * 1e6)
        s["cpu_us"] += int((time.perf_counter() - t1) * 1e6)
        s["routes"] += int(eid.numel())
        s["device_routes"] += int(on_dev.sum())
        s["cpu_routes"] += int((~on_dev).sum())
        s["hits"] += res.hits
        s["misses"] += res.misses
        s["fills"] += int(res.copy_ids.numel())
        s["evictions"] += res.evictions
        s["bytes_copied"] += copied
        return y

    def resize(self, slots: int) -> dict:
        """Resize the cache between forwards (waits for a pending prefetch first); see ExpertCache.resize."""
        self._join()
        out = self.cache.resize(slots)
        self.slot_bank = self.cache.slot_bank()
        return out

    def _prefetch(self, layer: int, busy_slots: torch.Tensor) -> None:
        """Choose slots for every expert of ``layer`` now (sparing ``busy_slots``) and copy them in a thread."""
        c, E = self.cache, self.cache.bank.num_experts
        busy = busy_slots[busy_slots >= 0].unique()
        was = c.pinned[busy].clone()
        c.pinned[busy] = True
        try:
            res = c.control(torch.arange(layer * E, (layer + 1) * E), lambda m: m, observe=False)
        finally:
            c.pinned[busy] = was
        s = self.stats[layer]
        s["prefetched"] += int(res.copy_ids.numel())
        s["evictions"] += res.evictions
        s["bytes_copied"] += sum(
            t[0].numel() * t.element_size() for t in c.bank.tensors.values()
        ) * int(res.copy_ids.numel())
        self._copy = threading.Thread(
            target=c.copy_in, args=(res.copy_ids, res.copy_slots), daemon=True
        )
        self._copy.start()

    def _join(self) -> None:
        if self._copy is not None:
            self._copy.join()
            self._copy = None

    def _static_step(self, eid: torch.Tensor) -> None:
        """Count routes during warm-up, then load the most-routed ids once and pin them."""
        self.calls += 1
        if self.calls <= self.warmup_calls:
            self.route_counts += torch.bincount(eid, minlength=self.route_counts.numel())
        if self.calls == self.warmup_calls:
            c = self.cache
            hot = torch.sort(
                torch.argsort(self.route_counts, descending=True, stable=True)[: c.num_slots]
            ).values
            slots = torch.arange(hot.numel())
            c.slot_of_id[hot] = slots
            c.id_of_slot[slots] = hot
            c.pinned[slots] = True
            c.copy_in(hot, slots)

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for s in self.stats.values():
            for k, v in s.items():
                out[k] += v
        return dict(out)
