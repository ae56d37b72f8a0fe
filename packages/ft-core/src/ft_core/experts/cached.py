"""The expert memory hierarchy as an ExpertBackend: routes whose expert is resident in the
ExpertCache run on the device slots, misses are filled (q of them, by the policy) or run on the
host bank; the two partial sums are added (DESIGN §2, §3). Counters per MoE layer.

Policies (``q`` = fills for m distinct missing ids in one layer step):
  fill    q = m
  hybrid  q = clamp(floor(m * B_P / B_H + 1/2), 1, m) for m >= 1   (B_P >= B_H degenerates to fill)
  static  a hot set chosen from the routing counts of the first forward, pinned; q = 0 after

One layer step on the Device (device/streams.py): the fills are queued on the copy stream; the slot
GEMM is queued on the compute stream behind them; the host computes the CPU routes meanwhile; then
the host waits for the slot GEMM and adds the two partial sums in a fixed order (device first, then
host), so the result never depends on which branch finished first.

Decode-sized steps with the Triton control kernel take the queued path when the slot GEMM skips CPU
routes itself and the slot-copy kernel can read the bank (``_run_queued``): control, fills and the
slot GEMM are queued back to back with nothing read in between (the copy list's length is read on
the device); the host then reads the control step's outcome alone (route slots and counters, copied
back as soon as control is done), runs the CPU routes while the device works, and hands back y with
the caller's stream told to wait for the GEMM: the host never waits for the expert math of a device.
With ``join`` callback or flag (``EngineConfig.cpu_join``, experts/joined.py) a replayed step's CPU
routes run in C++ in the device's stream order instead (``_run_joined``), so the host does not wait for
the control step either; their counters are kept by the C++ branch (``stats`` adds them).
Inside a whole decode step being captured (decode_graph.py: ``inline``) a step launches that joined step's
work directly, the cache clock ticked on the device; a step that would read anything back raises
``NotCapturable`` there.

Prefill (a call with >= PREFILL_TOKENS tokens, fill/hybrid policies) double-buffers when the cache
holds two full layers: every miss of layer l is filled, and while layer l computes, the copy stream
loads all experts of layer l+1 into slots chosen now (layer l's slots pinned meanwhile). The next
layer's slot GEMM is queued behind that copy (stream order), so nothing waits on the host.
``overlap=False`` turns this off for comparison.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from ft_core.device import CpuDevice, Device
from ft_core.experts.backends import ExpertBackend
from ft_core.experts.bank import ExpertBank
from ft_core.experts.cache import TRITON_MAX_ROUTES, ExpertCache
from ft_core.experts.captured import StepGraphs
from ft_core.experts.joined import branch_for
from ft_core.experts.timing import hybrid_q

POLICIES = ("fill", "hybrid", "static")


class NotCapturable(RuntimeError):
    """A step that cannot run inside a captured whole decode step (it would read the device back)."""


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
    host_only = False  # x on the host or on the cache's device

    def __init__(
        self,
        cache: ExpertCache,
        policy: str,
        ratio: float | None,
        device_backend: ExpertBackend,
        host_backend: ExpertBackend,
        warmup_calls: int,
        overlap: bool = True,
        device: Device | None = None,
        graphs: bool = True,
        join: str = "host",
    ):
        if policy not in POLICIES:
            raise ValueError(f"moe backend {policy!r} is not one of cpu, {', '.join(POLICIES)}")
        self.name = policy
        self.cache, self.policy = cache, policy
        self.q_of_m = q_policy(policy, ratio)
        # the same rule as the Triton control kernel's mode (cache.control_impl "triton")
        modes = {"fill": ("fill", 1.0), "hybrid": ("hybrid", ratio), "static": ("cpu", 1.0)}
        self.mode = modes[policy]
        self.device_backend, self.host_backend = device_backend, host_backend
        self.slot_bank = cache.slot_bank()
        self.warmup_calls = (
            warmup_calls  # static: calls (one per MoE layer) counted before freezing
        )
        self.calls = 0
        self.route_counts = torch.zeros(cache.bank.num_ids, dtype=torch.int64)
        self._stats: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.overlap = overlap
        self.num_layers = cache.bank.num_ids // cache.bank.num_experts
        self.dev = device or CpuDevice()  # the slots' streams (a CpuDevice's are threads)
        self._copied = None  # the Event after the last copy queued (fills, prefetch, hot set)
        self._waited = None  # the last of them the compute stream was told to wait for
        self.queued = True  # take _run_queued where it applies (benchmarks turn it off to compare)
        # its device work replayed from graphs (``graphs.enabled = False``: launched kernel by kernel)
        # the CPU routes of a replayed step joined in the device's stream (experts/joined.py) or by the host
        self.join = join
        layers, dev_name = self.num_layers, cache.device

        def make_branch(x, tok, eid, gate):
            return branch_for(join, dev_name, host_backend, cache.bank, layers, x, eid, gate)

        self.graphs = StepGraphs(
            cache, device_backend, self.mode, None if join == "host" else make_branch
        )
        self.graphs.enabled = graphs
        # inside a whole decode step being captured (decode_graph.py): steps launch their work directly
        # and may not read anything back, so only the joined step may run (``NotCapturable`` otherwise)
        self.inline = False

    def supports(self, bank: ExpertBank) -> bool:
        # a mixed bank's format follows the layer, which a slot id does not carry
        return (
            not bank.layer_fmts
            and self.host_backend.supports(bank)
            and self.device_backend.supports(self.slot_bank)
        )

    def run(self, bank, x, tok, eid, gate):
        """x [T, H] on the host or on the cache's device (dense layers on the GPU); routes there too.
        Returns y [T, H] float32 on x's device."""
        tok, eid = tok.long(), eid.long()  # the cache's tables are int64 (routers may give int32)
        ids = eid  # for the control step, on whichever device the router ran
        if self.policy == "static":
            self._static_step(eid.cpu())
        E, c, dev = bank.num_experts, self.cache, self.dev
        prefill = (
            self.overlap
            and self.policy != "static"
            and x.shape[0] >= PREFILL_TOKENS
            and c.num_slots >= 2 * E
        )
        if self.inline:
            return self._run_inline(x, tok, eid, gate, prefill)
        if not prefill and self._queued(eid.numel()):
            return self._run_queued(bank, x, tok, eid, gate)
        if x.device.type != "cpu":  # the host's share needs host copies (one small copy each)
            tok, eid, gate = tok.cpu(), eid.cpu(), gate.cpu()
        layer = int(eid[0]) // bank.num_experts if eid.numel() else -1
        if prefill:
            res = c.control(ids, lambda m: m, mode=("fill", 1.0))
        else:
            res = c.control(ids, self.q_of_m, mode=self.mode)
        self._copy(res.copy_ids, res.copy_slots)
        # the slot GEMM waits for every copy queued so far (FIFO), not for the prefetch queued next
        need = self._copied
        if prefill and 0 <= layer < self.num_layers - 1:
            self._prefetch(layer + 1, res.route_slot)
        route_slot = res.route_slot.cpu()
        on_dev = route_slot >= 0
        t0 = time.perf_counter()
        pending = None
        if bool(on_dev.any()):
            if need is not None and need is not self._waited:  # stream order keeps older waits
                dev.compute.wait(need)
                self._waited = need
            dev.compute.follow_current()  # x made by the dense layers on the device
            pending = dev.compute.run(
                self._slot_gemm(x, tok[on_dev], route_slot[on_dev], gate[on_dev])
            )
        y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        y_host = None
        if not bool(on_dev.all()):
            off = ~on_dev
            xh = x.cpu()  # x on the device: the copy the CPU kernels read (a no-op on the host)
            y_host = self.host_backend.run(bank, xh, tok[off], eid[off], gate[off])
        t1 = time.perf_counter()
        if pending is not None:
            pending.synchronize()
            y += pending.result().to(y.device)
        if y_host is not None:
            y += y_host.to(y.device)
        counts = (int(res.copy_ids.numel()), res.hits, res.misses, res.evictions)
        self._count(layer, on_dev, counts, t1 - t0, time.perf_counter() - t1)
        return y

    def _queued(self, routes: int) -> bool:
        """Whether a (non-prefill) step of ``routes`` routes takes ``_run_queued``."""
        c = self.cache
        return (
            self.queued
            and c.control_impl == "triton"
            and self.policy != "static"
            and routes <= TRITON_MAX_ROUTES
            and self.device_backend.skips_negative
            and c.listed_copy
        )

    def _run_queued(self, bank, x, tok, eid, gate):
        """One decode-sized layer step queued without a read back (module docstring), its device
        work replayed from graphs once its shape was seen (experts/captured.py). The same routes,
        slots and sum order as ``run``'s other path: y = device partial sum + host partial sum."""
        c, dev = self.cache, self.dev
        g = self.graphs.get(dev, x, tok, eid, gate)
        if g is not None and g.join is not None:
            return self._run_joined(g, x, tok, eid, gate)
        if g is not None:
            g.load(x, tok, eid, gate)
            c.tick()
            g.control.replay()
            told = dev.mark()  # the control graph's outcome is in g.host once this is done
        else:
            route_slot, copy_ids, copy_slots, counts = c.control_queued(eid, self.mode)
            told = dev.to_host([route_slot, counts, eid])  # queued now: waits for control alone
        if self._copied is not None and self._copied is not self._waited:  # prefetches queued
            dev.compute.wait(self._copied)
            self._waited = self._copied
        dev.compute.follow_current()
        if g is not None:
            pending = dev.compute.run(g.run_experts)
        else:
            xd, td, gd = (t.to(c.device, non_blocking=True) for t in (x, tok, gate))
            dev.compute.uses(xd, td, gd, route_slot, copy_ids, copy_slots, counts)
            slots, backend = self.slot_bank, self.device_backend

            def step():
                c.copy_listed(copy_ids, copy_slots, counts)
                return backend.run(slots, xd, td, route_slot, gd)

            pending = dev.compute.run(step)
        told.synchronize()  # the host waits here for the control step only
        if g is not None:
            rs, n, xh, th, eh, gh = g.host
        else:
            (rs, n, eh), xh = told.result(), None
        layer = int(eh[0]) // bank.num_experts if eid.numel() else -1
        on_dev = rs >= 0
        t0 = time.perf_counter()
        y_host = None
        if not bool(on_dev.all()):  # CPU routes: run them while the device fills and multiplies
            off = ~on_dev
            if xh is None:  # (the graph copied its inputs back with its outcome)
                back = dev.to_host([x, tok, gate])
                back.synchronize()
                xh, th, gh = back.result()
            y_host = self.host_backend.run(bank, xh, th[off], eh[off], gh[off])
        t1 = time.perf_counter()
        dev.join(pending)  # the caller's stream waits for the GEMM; the host does not
        if g is not None:  # the graph's y is overwritten by its next replay: a copy goes out
            y = g.y.to(x.device) + y_host.to(x.device) if y_host is not None else g.y.clone()
        else:
            y = pending.result().to(x.device)
            if y_host is not None:
                y = y + y_host.to(y.device)
        self._count(layer, on_dev, tuple(n.tolist()), t1 - t0, time.perf_counter() - t1)
        return y

    def _run_joined(self, g, x, tok, eid, gate, inline: bool = False):
        """``_run_queued``'s replayed step with its CPU routes joined in the device's stream
        (experts/joined.py): nothing read back, the host never waits; the same sum in the same order.
        ``inline``: the same work launched directly, inside a whole decode step being captured."""
        if not inline:
            g.branch.check()  # an error of an earlier step's branch (a captured step's: its replayer)
        c, dev = self.cache, self.dev
        g.load(x, tok, eid, gate)
        c.tick(inline)
        g.run_control(inline)  # control, then its outcome and the inputs into the branch's buffers
        if self._copied is not None and self._copied is not self._waited:  # prefetches queued
            dev.compute.wait(self._copied)
            self._waited = self._copied
        dev.compute.follow_current()
        pending = dev.compute.run(lambda: g.run_experts(inline))
        y_cpu = g.run_join(inline)  # the branch beside the experts' work, then its y to the device
        dev.join(pending)
        return g.y + y_cpu  # device first, then host, as the host join adds them

    def _run_inline(self, x, tok, eid, gate, prefill: bool):
        """A step inside a whole decode step being captured: the joined step's work launched directly.
        Raises NotCapturable where this step would read something back instead (``uncapturable``, a
        prefill-sized step) or prefetches are still queued."""
        R, T = eid.numel(), x.shape[0]
        why = "a prefill-sized MoE step" if prefill else self.uncapturable(R, T, x.dtype)
        if why is None and self._copied is not None and self._copied is not self._waited:
            why = "copies queued before the decode step (prefetches) are not waited for"
        if why is not None:
            raise NotCapturable(why)
        return self._run_joined(self.graphs.find(R, T, x.dtype), x, tok, eid, gate, inline=True)

    def uncapturable(self, routes: int, tokens: int, dtype: torch.dtype) -> str | None:
        """Why a decode step's MoE layer steps of ``routes`` routes over ``tokens`` tokens of ``dtype``
        could not run inside a captured decode step (None: they can: the shape's joined step exists)."""
        if not self._queued(routes):
            return f"a step of {routes} routes does not take the queued layer step"
        g = self.graphs.find(routes, tokens, dtype)
        if g is None or g.join is None:
            return f"no joined CPU branch for a step of {routes} routes (cpu_join {self.join!r})"
        return None

    def joined_branches(self) -> list:
        """The JoinedBranch of every captured step shape (what a decode step's replayer checks)."""
        return [b for b in self.graphs.branches.values() if b is not None]

    def quiesce(self) -> None:
        """Wait for every queued copy (before a whole decode step is captured: it may not wait for an
        event recorded outside it)."""
        if self._copied is not None and self._copied is not self._waited:
            self._copied.synchronize()
            self._waited = self._copied

    @property
    def stats(self) -> dict[int, dict[str, int]]:
        """Counters per MoE layer: the host's steps and the joined branches' (experts/joined.py), which
        count in C++ as they run (so a step still queued on a device is not in them yet)."""
        out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for layer, s in self._stats.items():
            out[layer].update(s)
        per = self.cache.bank.nbytes_per_id()
        for b in self.graphs.branches.values():
            if b is None:
                continue
            for layer, row in enumerate(b.branch.stats.tolist()):
                steps, routes, cpu, hits, misses, fills, evicted, cpu_us = row
                if not steps:
                    continue
                s = out[layer]
                s["cpu_us"] += cpu_us
                s["wait_us"] += 0  # the host does not wait for a joined step
                s["routes"] += routes
                s["device_routes"] += routes - cpu
                s["cpu_routes"] += cpu
                s["hits"] += hits
                s["misses"] += misses
                s["fills"] += fills
                s["evictions"] += evicted
                s["bytes_copied"] += fills * per
        return out

    def _count(self, layer: int, on_dev: torch.Tensor, counts: tuple, cpu_s: float, wait_s: float):
        """Add one step to layer ``layer``'s counters: routes served where (on_dev [R] bool), the control
        step's (copies, hits, misses, evictions), the host's time on CPU routes and waiting."""
        q, hits, misses, evicted = counts
        s = self._stats[layer]
        s["cpu_us"] += int(cpu_s * 1e6)
        s["wait_us"] += int(wait_s * 1e6)
        s["routes"] += int(on_dev.numel())
        s["device_routes"] += int(on_dev.sum())
        s["cpu_routes"] += int((~on_dev).sum())
        s["hits"] += hits
        s["misses"] += misses
        s["fills"] += q
        s["evictions"] += evicted
        s["bytes_copied"] += q * self.cache.bank.nbytes_per_id()

    def _copy(self, ids: torch.Tensor, slots: torch.Tensor) -> None:
        """Queue the copy of bank rows ``ids`` [q] into ``slots`` [q] on the copy stream."""
        if ids.numel():
            c = self.cache
            self._copied = self.dev.copy.run(lambda: c.copy_in(ids, slots))

    def _slot_gemm(self, x, tok, slot, gate):
        """The closure the compute stream runs: the routes on slots, inputs moved to the device."""
        d = self.cache.device
        x, tok, slot, gate = (t.to(d, non_blocking=True) for t in (x, tok, slot, gate))
        bank, backend = self.slot_bank, self.device_backend
        return lambda: backend.run(bank, x, tok, slot, gate)

    def resize(self, slots: int) -> dict:
        """Resize the cache between forwards (waits for queued copies and GEMMs first); see ExpertCache.resize."""
        self.dev.synchronize()
        out = self.cache.resize(slots)
        self.slot_bank = self.cache.slot_bank()
        self.graphs.clear()  # captured against the old tables and slots
        if self.cache.device.startswith("cuda"):  # hand the old store back, so free memory shows it
            torch.cuda.empty_cache()
        return out

    def _prefetch(self, layer: int, busy_slots: torch.Tensor) -> None:
        """Choose slots for every expert of ``layer`` now (sparing ``busy_slots``) and queue their copy."""
        c, E = self.cache, self.cache.bank.num_experts
        busy = busy_slots[busy_slots >= 0].unique()
        was = c.pinned[busy].clone()
        c.pinned[busy] = True
        try:
            ids = torch.arange(layer * E, (layer + 1) * E)
            res = c.control(ids, lambda m: m, observe=False, mode=("fill", 1.0))
        finally:
            c.pinned[busy] = was
        s = self._stats[layer]
        s["prefetched"] += int(res.copy_ids.numel())
        s["evictions"] += res.evictions
        s["bytes_copied"] += c.bank.nbytes_per_id() * int(res.copy_ids.numel())
        self._copy(res.copy_ids, res.copy_slots)

    def _static_step(self, eid: torch.Tensor) -> None:
        """Count routes during warm-up, then load the most-routed ids once and pin them."""
        self.calls += 1
        if self.calls <= self.warmup_calls:
            self.route_counts += torch.bincount(eid, minlength=self.route_counts.numel())
        if self.calls == self.warmup_calls:
            c = self.cache
            hot = torch.sort(
                torch.argsort(self.route_counts, descending=True, stable=True)[: c.num_slots]
            ).values.to(c.device)
            slots = torch.arange(hot.numel(), device=c.device)
            c.slot_of_id[hot] = slots
            c.id_of_slot[slots] = hot
            c.pinned[slots] = True
            self._copy(hot, slots)

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for s in self.stats.values():
            for k, v in s.items():
                out[k] += v
        return dict(out)
