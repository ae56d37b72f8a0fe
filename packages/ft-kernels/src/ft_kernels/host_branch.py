"""``HostBranch``: the CPU share of a device's MoE layer step, run by C++ from page-locked buffers with no
Python and no CUDA call in between (``csrc/cpu/host_branch.h``), so a device can queue it inside its own
stream order.

A step's device work copies its outcome and inputs into the branch's buffers (``io``): route slots [R]
int64 (< 0: the route is the CPU's), the control step's counters [4] int32 (copies, hits, misses,
evictions), x [T, H] (float32 or bfloat16), tok / eid [R] int64, gate [R] float32. A run computes the
routes with slot < 0 through ``moe_experts`` into y [T, H] float32 (zeros when there are none) and adds
per-layer counters to ``stats`` [layers, len(STATS)] int64. Three ways to run it:

  ``run()``                 now, on the calling thread (the CPU stand-in of a host function)
  ``call_address()``,       a ``cudaHostFn_t`` and its data: ``cudaLaunchHostFunc(stream, call_address(),
  ``address()``             address())`` queues a run in the stream's order (captured as a host node)
  ``start_polling(f, d)``   a thread of the branch runs a step each time int32 ``f[0]`` changes, then sets
                            ``d[0] = f[0]`` (y written first): the polled-flag join

An error inside a run zeroes y, is kept, and ``check()`` raises it. Twin: ``reference.moe_experts`` on
the routes with slot < 0. Legend: T = tokens, H = hidden, R = routes.
"""

from __future__ import annotations

import torch

from ft_kernels import _C
from ft_kernels.cpu import ACTS, _a
from ft_kernels.formats import FORMATS, ExpertWeights

STATS = ("steps", "routes", "cpu_routes", "hits", "misses", "fills", "evictions", "cpu_us")
IO = ("route_slot", "counts", "x", "tok", "eid", "gate", "y")


class HostBranch:
    def __init__(
        self,
        w13: ExpertWeights,  # [N, 2I, H] the whole bank, flat ids
        w2: ExpertWeights,  # [N, H, I]
        io: dict[str, torch.Tensor],  # IO's tensors (module docstring), contiguous host tensors
        experts: int,  # experts per MoE layer (a flat id's layer is id // experts)
        layers: int,
        act: str = "swiglu",
        alpha: float = 1.702,
        limit: float = 7.0,
        act_int8: bool = False,
    ):
        if act not in ACTS:
            raise ValueError(f"act must be one of {', '.join(ACTS)}, got {act!r}")
        missing = [k for k in IO if k not in io]
        if missing:
            raise ValueError(f"io lacks {', '.join(missing)}")
        self.io = io
        self.stats = torch.zeros(layers, len(STATS), dtype=torch.int64)
        args = []
        for w in (w13, w2):
            if w.fmt not in FORMATS:
                raise ValueError(f"fmt {w.fmt!r} is not one of {', '.join(FORMATS)}")
            args += [FORMATS[w.fmt], _a(w.q), _a(w.scale), _a(w.zero), w.group, w.global_scale]
            args.append(_a(w.bias))
        io_args = [_a(io[k]) for k in IO]
        self._b = _C.HostBranch(
            *args, ACTS[act], alpha, limit, act_int8, *io_args, experts, _a(self.stats)
        )
        self._polled: tuple | None = None

    def run(self) -> None:
        self._b.run()

    def address(self) -> int:
        return self._b.address()

    @staticmethod
    def call_address() -> int:
        return _C.HostBranch.call_address()

    def runs(self) -> int:
        """Steps run so far (every way)."""
        return self._b.runs()

    def start_polling(self, flag: torch.Tensor, done: torch.Tensor) -> None:
        """flag, done: int32 [>= 1] host tensors (page-locked where a device writes / reads them)."""
        self._polled = (flag, done)
        self._b.start_polling(_a(flag), _a(done))

    def stop_polling(self) -> None:
        self._b.stop_polling()
        self._polled = None

    def check(self) -> None:
        """Raise the first error a run met (RuntimeError naming it), if any."""
        err = self._b.error()
        if err:
            raise RuntimeError(f"the MoE layer's CPU branch failed: {err}")
