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
With a joined CPU branch (experts/joined.py: ``cpu_join`` callback or flag) the outcome goes into the
branch's page-locked buffers, and a third graph holds the join:
  join     the branch (a host node, or the flag kernels) and the copy of its y back; replayed on the
           caller's stream once the experts graph is queued, so the CPU routes run beside it.
A replay reads static inputs: the step's x, tok, eid, gate are copied into them first; the clock is
read from the cache's ``clock_t``. A shape's first step runs uncaptured (its kernels compile then),
its second is captured, later ones replay. At most ``MAX_SHAPES`` shapes; ``clear`` drops them all
(the cache's tables or slots were reallocated: ``resize``; ``epoch`` counts those). Where capture fails,
the graphs are turned off with a warning and the uncaptured queued step goes on. Inside a whole decode
step being captured (decode_graph.py) a graph may not be replayed: ``run_control`` / ``run_experts`` /
``run_join`` with ``inline`` launch the same work on the same static tensors instead.
Legend: T = tokens, H = hidden, R = routes.
"""

from __future__ import annotations

import logging

import torch

from ft_core.device import Device
from ft_core.experts.backends import ExpertBackend
from ft_core.experts.cache import ExpertCache
from ft_core.experts.joined import JoinedBranch

MAX_SHAPES = 8


class StepGraph:
    """One shape's graphs (control, experts; join where a branch is given) and their static tensors."""

    def __init__(
        self,
        cache: ExpertCache,
        dev: Device,
        backend: ExpertBackend,
        mode,
        x,
        tok,
        eid,
        gate,
        branch: JoinedBranch | None = None,
    ):
        d = cache.device
        self.x, self.tok, self.eid, self.gate = (t.to(d).clone() for t in (x, tok, eid, gate))
        self.branch = branch
        if branch is not None:
            self.host = branch.outcome()
        else:
            pin = d != "cpu"
            # route slots [R]; copies, hits, misses, evictions [4]; then x, tok, eid, gate
            specs = [((eid.numel(),), torch.int64), ((4,), torch.int32)]
            specs += [(t.shape, t.dtype) for t in (self.x, self.tok, self.eid, self.gate)]
            self.host = [torch.empty(shape, dtype=dt, pin_memory=pin) for shape, dt in specs]
        slots = cache.slot_bank()
        self.y: torch.Tensor | None = None  # [T, H] float32: the device's partial sum

        # the closures hold the tensors, not self: no reference cycle keeps a graph (and a branch's C++
        # object, which nanobind reports at exit) alive past its StepGraph
        xs, ts, es, gs, host = self.x, self.tok, self.eid, self.gate, self.host

        def control():
            out = cache.launch(es, mode, True)
            for h, v in zip(host, (out[0], out[3], xs, ts, es, gs)):
                h.copy_(v, non_blocking=True)
            return out

        self.control = ctl = dev.capture(control)

        def experts():
            rs, ci, cs, n = ctl.outputs
            cache.copy_listed(ci, cs, n)
            return backend.run(slots, xs, ts, rs, gs)

        self.experts = dev.capture(experts)
        # the CPU routes' y [T, H] float32 on the device, once replayed
        self.join = None if branch is None else dev.capture(lambda: branch.join(dev))
        # the same work launched directly (``inline``: inside a whole decode step being captured, where
        # a graph may not be replayed): control's outcome lands in the control graph's outputs
        self._control, self._experts = control, experts
        self._join = None if branch is None else (lambda: branch.join(dev))

    def load(self, x, tok, eid, gate) -> None:
        """Copy the step's inputs into the static ones (queued on the caller's stream)."""
        for dst, src in zip((self.x, self.tok, self.eid, self.gate), (x, tok, eid, gate)):
            dst.copy_(src, non_blocking=True)

    def run_control(self, inline: bool = False) -> None:
        """Queue the control step on the caller's stream: replay its graph, or (``inline``) launch its
        kernels and copy the outcome into the graph's outputs, which the experts step reads."""
        if not inline:
            self.control.replay()
            return
        for dst, src in zip(self.control.outputs, self._control()):
            dst.copy_(src)

    def run_experts(self, inline: bool = False) -> None:
        """Replay the experts graph, or launch its work (``inline``), on the stream the caller runs this
        on; its y in ``self.y``."""
        self.y = self._experts() if inline else self.experts.replay()

    def run_join(self, inline: bool = False) -> torch.Tensor:
        """Queue the joined branch and its y back on the caller's stream (graph or ``inline``)."""
        return self._join() if inline else self.join.replay()


class StepGraphs:
    """The captured shapes of one CachedBackend; ``get`` gives a shape's StepGraph once captured."""

    def __init__(self, cache: ExpertCache, backend: ExpertBackend, mode, branch_for=None):
        """branch_for(x, tok, eid, gate) -> JoinedBranch | None: a shape's joined CPU branch (None: the
        host joins it; experts/joined.py), made once a shape and kept across ``clear``."""
        self.cache, self.backend, self.mode = cache, backend, mode
        self.branch_for = branch_for
        self.enabled = True
        self.replays = 0  # steps replayed from a graph
        self._graphs: dict[tuple, StepGraph] = {}
        # + 1 by each ``clear``: what captured the StepGraphs' tensors must capture again
        self.epoch = 0
        self._seen: set[tuple] = set()
        self.branches: dict[tuple, JoinedBranch | None] = {}

    def find(self, routes: int, tokens: int, dtype: torch.dtype) -> StepGraph | None:
        """The captured StepGraph of a step of ``routes`` routes over ``tokens`` tokens of ``dtype``, if
        any (never a new capture: what a whole decode step being captured launches inline)."""
        return self._graphs.get((routes, tokens, dtype))

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
        if key not in self.branches:
            self.branches[key] = self._branch(x, tok, eid, gate)
        try:
            g = StepGraph(
                self.cache, dev, self.backend, self.mode, x, tok, eid, gate, self.branches[key]
            )
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

    def _branch(self, x, tok, eid, gate) -> JoinedBranch | None:
        """A new shape's joined CPU branch; None (the host joins its CPU routes) where none is asked for
        or making one failed (with a warning: the host join is the same computation)."""
        if self.branch_for is None:
            return None
        try:
            return self.branch_for(x, tok, eid, gate)
        except Exception as e:  # noqa: BLE001
            logging.getLogger("ft_core.engine").warning(
                "joining the CPU routes in the device's stream failed (%s: %s); the host joins them",
                type(e).__name__,
                e,
            )
            return None

    def clear(self) -> None:
        self.epoch += 1
        self._graphs.clear()
        self._seen.clear()
