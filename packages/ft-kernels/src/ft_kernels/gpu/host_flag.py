"""The polled-flag join of a device's MoE layer step with its CPU branch (``ft_kernels.HostBranch``):
two one-program Triton kernels on the device's stream, capturable in a graph.

  ``raise_flag(seq, flag)``   seq[0] += 1 (device memory), then flag[0] = seq[0] in page-locked host
                              memory (a write-through store: not left in the GPU's L2), which the
                              branch's polling thread watches. Queued behind the
                              copies of the step's outcome into the branch's buffers, so those are in
                              host memory before the flag moves.
  ``wait_flag(seq, done)``    spins until done[0] (page-locked, set by the branch once its partial sum
                              is written) equals seq[0]: the stream's later work (the copy of that sum
                              back, the add) starts after the branch.

On a GPU ``flag`` and ``done`` are read and written through their unified addresses (page-locked memory
is mapped on a UVA system), every read of ``done`` a volatile load (relaxed, system scope in PTX:
it sees the host's store) across the bus. On the CPU stand-in
(Triton's interpreter) all three are host tensors. Twins: ``raise_flag_reference``, ``wait_flag_reference``.
"""

from __future__ import annotations

import time

import torch
import triton
import triton.language as tl


@triton.jit
def _raise(seq, flag):
    s = tl.load(seq) + 1
    tl.store(seq, s)
    tl.store(flag, s, cache_modifier=".wt")  # written through the GPU's L2 to host memory


@triton.jit
def _wait(seq, done):
    s = tl.load(seq)
    d = tl.load(done, volatile=True)
    while d != s:
        d = tl.load(done, volatile=True)


def _check(name: str, t: torch.Tensor) -> None:
    if t.dtype != torch.int32 or t.numel() < 1:
        raise ValueError(f"{name} must be int32 [>= 1], got {t.dtype} {tuple(t.shape)}")


def raise_flag(seq: torch.Tensor, flag: torch.Tensor) -> None:
    """seq: int32 [1] on the device; flag: int32 [1] page-locked host memory (a GPU) or host (stand-in)."""
    _check("seq", seq), _check("flag", flag)
    _raise[(1,)](seq, flag)


def wait_flag(seq: torch.Tensor, done: torch.Tensor) -> None:
    """Queue a wait until done[0] == seq[0] (shapes as ``raise_flag``)."""
    _check("seq", seq), _check("done", done)
    _wait[(1,)](seq, done)


def raise_flag_reference(seq: torch.Tensor, flag: torch.Tensor) -> None:
    seq[0] += 1
    flag[0] = seq[0]


def wait_flag_reference(seq: torch.Tensor, done: torch.Tensor, poll_s: float = 1e-5) -> None:
    want = int(seq[0])
    while int(done[0]) != want:
        time.sleep(poll_s)
