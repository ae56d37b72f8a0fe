"""The queued layer step's device work as captured graphs (DESIGN §3): a decode step's MoE layer is
a handful of small kernels whose launch cost from Python (Triton's launcher: tens of microseconds a
kernel) exceeded their run time; replaying a CUDA graph launches them all at once.

Two graphs per shape (routes R, tokens T, activation dtype), shared by every MoE layer:
  control  the cache-control kernel on the static route ids, then the copy of its outcome (route
           slots [R], counters [4]) and of the step's inputs (x, tok, eid, gate: what the CPU
           routes need, so they need no second trip) into page-locked host buffers; replayed on
           the caller's stream.
  experts  the fills by the slot-copy kernel (the list's length read on the device) and the slot
           GEMM over every route (CPU routes skipped by it); replayed on the compute stream.
A replay reads static inputs: the step's x, tok, eid, gate are copied into them first; the clock is
read from the cache's ``clock_t``. A shape's first step runs uncaptured (its kernels compile then),
its second is captured, later ones replay. At most ``MAX_SHAPES`` shapes; ``clear`` drops them all
(the cache's tables or slots were reallocated: ``resize``). Where capture fails, the graphs are
turned off with a warning and the uncaptured queued step goes on.
Legend: T = tokens, H = hidden, R = routes.
"""

from __future__ import annotations

import logging

import torch

from ft_core.device import Device
from ft_core.experts.backends import ExpertBackend
from ft_core.experts.cache import ExpertCache

MAX_SHAPES = 8


class StepGraph:
    """One shape's pair of graphs and their static tensors."""

    def __init__(
        self, cache: ExpertCache, dev: Device, backend: ExpertBackend, mode, x, tok, eid, gate
    ):
        d = cache.device
        self.x, self.tok, self.eid, self.gate = (t.to(d).clone() for t in (x, tok, eid, gate))
        pin = d != "cpu"
        # route slots [R]; copies, hits, misses, evictions [4]; then x, tok, eid, gate
        specs = [((eid.numel(),), torch.int64), ((4,), torch.int32)]
        specs += [(t.shape, t.dtype) for t in (self.x, self.tok, self.eid, self.gate)]
        self.host = [torch.empty(shape, dtype=dt, pin_memory=pin) for shape, dt in specs]
        slots = cache.slot_bank()
        self.y: torch.Tensor | None = None  # [T, H] float32: the device's partial sum

        def control():
            out = cache.launch(self.eid, mode, True)
            for h, v in zip(self.host, (out[0], out[3], self.x, self.tok, self.eid, self.gate)):
                h.copy_(v, non_blocking=True)
            return out

        def experts():
            rs, ci, cs, n = self.control.outputs
            cache.copy_listed(ci, cs, n)
            return backend.run(slots, self.x, self.tok, rs, self.gate)

        self.control = dev.capture(control)
        self.experts = dev.capture(experts)

    def load(self, x, tok, eid, gate) -> None:
        """Copy the step's inputs into the static ones (queued on the caller's stream)."""
        for dst, src in zip((self.x, self.tok, self.eid, self.gate), (x, tok, eid, gate)):
            dst.copy_(src, non_blocking=True)

    def run_experts(self) -> None:
        """Replay the experts graph (on the stream the caller runs this on); its y in ``self.y``."""
        self.y = self.experts.replay()


class StepGraphs:
    """The captured shapes of one CachedBackend; ``get`` gives a shape's StepGraph once captured."""

    def __init__(self, cache: ExpertCache, backend: ExpertBackend, mode):
        self.cache, self.backend, self.mode = cache, backend, mode
        self.enabled = True
        self.replays = 0  # steps replayed from a graph
        self._graphs: dict[tuple, StepGraph] = {}
        self._seen: set[tuple] = set()

    def get(self, dev: Device, x: torch.Tensor, tok, eid: torch.Tensor, gate) -> StepGraph | None:
        """The StepGraph of this step's shape (captured on ``dev``, the cache's device, on its second
        sighting); None while the step should run uncaptured (first sighting, too many shapes, graphs
        off)."""
        key = (eid.numel(), x.shape[0], x.dtype)
        g = self._graphs.get(key)
        if g is not None or not self.enabled:
            self.replays += g is not None
            return g
        if key not in self._seen or len(self._graphs) >= MAX_SHAPES:
            self._seen.add(key)
            return None
        try:
            g = StepGraph(self.cache, dev, self.backend, self.mode, x, tok, eid, gate)
        except Exception as e:  # noqa: BLE001 -- the uncaptured step is the same computation
            self.enabled = False
            logging.getLogger("ft_core.engine").warning(
                "capturing the MoE layer step in a graph failed (%s: %s); running it uncaptured",
                type(e).__name__,
                e,
            )
            return None
        self._graphs[key] = g
        self.replays += 1
        return g

    def clear(self) -> None:
        self._graphs.clear()
        self._seen.clear()
