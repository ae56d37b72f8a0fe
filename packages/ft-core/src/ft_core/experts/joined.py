"""The CPU share of a decode-sized MoE layer step joined in the device's stream order (DESIGN §3;
``EngineConfig.cpu_join``), so the host never waits inside a step.

With ``cpu_join="host"`` (experts/cached.py) the host waits for the cache step's outcome, runs the routes
left to the CPU itself, and hands back their sum. Here the device does all of it in its stream:

  caller's stream   control -> outcome and inputs copied into the branch's page-locked buffers ->
                    [the branch] -> its y copied back -> (waits for the slot GEMM) -> y_dev + y_cpu
  compute stream                 fills -> slot GEMM over the cached routes -> y_dev

[the branch] is ``ft_kernels.HostBranch`` (C++, no GIL, no CUDA call) on the routes whose slot is < 0,
reached one of two ways:
  callback  a host function queued in the stream (``Device.host_func``: cuLaunchHostFunc; a host node
            in a captured graph); the stream holds until it returns.
  flag      ``raise_flag`` (device counter + 1, written to a page-locked flag) wakes the branch's
            polling thread; ``wait_flag`` spins on the device until the branch's done word matches.
Either way the CPU routes run while the compute stream fills and multiplies, and the sum is added in the
fixed order (device, then host) of the host join: the three joins give the same bits.

One ``JoinedBranch`` a step shape (tokens, routes, activation dtype): the buffers are reused by every
MoE layer in turn, which the stream's order makes safe (a layer's copies into them queue behind the
previous layer's branch and its copy back). Legend: T = tokens, H = hidden, R = routes.
"""

from __future__ import annotations

import torch
from ft_kernels import HostBranch

from ft_core.device import Device
from ft_core.experts.backends import ExpertBackend
from ft_core.experts.bank import ExpertBank

JOINS = ("callback", "flag")
OUTCOME = ("route_slot", "counts", "x", "tok", "eid", "gate")  # what the control step copies back


class JoinedBranch:
    """One step shape's page-locked buffers, the C++ branch bound to them, and its join."""

    def __init__(self, how: str, device: str, branch_args: dict, experts: int, layers: int, x, eid):
        if how not in JOINS:
            raise ValueError(f"cpu_join {how!r} is not one of host, {', '.join(JOINS)}")
        self.how, self.device = how, device
        pin = device != "cpu"
        (T, H), R = x.shape, eid.numel()
        specs = {
            "route_slot": ((R,), torch.int64),
            "counts": ((4,), torch.int32),
            "x": ((T, H), x.dtype),
            "tok": ((R,), torch.int64),
            "eid": ((R,), torch.int64),
            "gate": ((R,), torch.float32),
            "y": ((T, H), torch.float32),
        }
        self.io = {k: torch.zeros(s, dtype=dt, pin_memory=pin) for k, (s, dt) in specs.items()}
        self.branch = HostBranch(io=self.io, experts=experts, layers=layers, **branch_args)
        if how == "flag":
            from ft_kernels.gpu import host_flag  # Triton loads lazily

            self.flag = torch.zeros(1, dtype=torch.int32, pin_memory=pin)
            self.done = torch.zeros(1, dtype=torch.int32, pin_memory=pin)
            self.seq = torch.zeros(1, dtype=torch.int32, device=device)
            if pin:
                self._raise, self._wait = host_flag.raise_flag, host_flag.wait_flag
                # compile both kernels before any capture (a module load inside a capture fails it), on
                # words as aligned as the real ones (Triton compiles a variant per pointer alignment)
                s, f = (torch.zeros(1, dtype=torch.int32, device=device) for _ in range(2))
                self._raise(s, f)
                self._wait(s, f)
            else:  # the stand-in: their twins (Triton's interpreter is not safe beside the compute
                # stream's thread, which runs the slot GEMM under it at the same time)
                self._raise = host_flag.raise_flag_reference
                self._wait = host_flag.wait_flag_reference
            self.branch.start_polling(self.flag, self.done)

    def outcome(self) -> list[torch.Tensor]:
        """The host buffers the control step's outcome and inputs go to, in OUTCOME's order."""
        return [self.io[k] for k in OUTCOME]

    def join(self, dev: Device) -> torch.Tensor:
        """Queue the branch behind the caller's work (the outcome's copies) and its y [T, H] float32 back
        to the device behind it; returns that y (on the stand-in: the buffer itself)."""
        if self.how == "callback":
            dev.host_func(self.branch)
        else:
            self._raise(self.seq, self.flag)
            self._wait(self.seq, self.done)
        return self.io["y"].to(self.device, non_blocking=True)

    def check(self) -> None:
        """Raise the first error a run of the branch met (a host function cannot raise where it runs)."""
        self.branch.check()

    def close(self) -> None:
        if self.how == "flag":
            self.branch.stop_polling()


def branch_for(
    how: str, device: str, host: ExpertBackend, bank: ExpertBank, layers: int, x, eid, gate
) -> JoinedBranch | None:
    """The JoinedBranch of a step shaped like (x [T, H], eid [R], gate [R]), or None where the host join
    must serve it: ``how`` is host, the host backend is not the C++ kernels' (or would run some of these
    routes elsewhere: ``CpuKernelBackend.branch_args``), or gate is not float32."""
    args = getattr(host, "branch_args", None)
    if how == "host" or args is None or gate.dtype != torch.float32:
        return None
    a = args(bank, x.shape[0], x.dtype)
    return None if a is None else JoinedBranch(how, device, a, bank.num_experts, layers, x, eid)
