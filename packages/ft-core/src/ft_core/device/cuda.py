"""CudaDevice: the device interface (device/streams.py) on torch.cuda streams and events.

A closure run on a stream launches its kernels from the calling thread under ``torch.cuda.stream``
and returns at once; the Event is a ``torch.cuda.Event`` recorded after them. Tensors a closure
allocates are tied to the stream that made them; its result is usable by another stream once that
stream ``wait``s for the event (``result`` marks a tensor result used by the caller's stream). Copies from the expert
banks are asynchronous because the loader pins them where CUDA is present (loader/ftw_io.pin_in_place).
Not run in CI (no GPU there):
``benchmarks/gpu_check.py`` exercises it.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Callable

import torch

from ft_core.device.streams import Device, Event, Graph, Stream


class _CudaEvent(Event):
    def __init__(self, ev: torch.cuda.Event, value: Any):
        self._ev, self._value = ev, value

    def synchronize(self) -> None:
        self._ev.synchronize()

    def result(self) -> Any:
        """The closure's value. A tensor made on the event's stream is marked used by the caller's
        current stream too, so the allocator does not hand its memory back to the event's stream
        while the caller's kernels (queued, not yet run) still read it."""
        v = self._value
        if isinstance(v, torch.Tensor) and v.is_cuda:
            v.record_stream(torch.cuda.current_stream(v.device))
        return v


class _CudaStream(Stream):
    def __init__(self, device: torch.device):
        self._s = torch.cuda.Stream(device=device)

    def run(self, fn: Callable[[], Any]) -> Event:
        with torch.cuda.stream(self._s):
            value = fn()
            ev = torch.cuda.Event()
            ev.record(self._s)
        return _CudaEvent(ev, value)

    def follow_current(self) -> None:
        self._s.wait_stream(torch.cuda.current_stream(self._s.device))

    def uses(self, *tensors) -> None:
        for t in tensors:
            if t.is_cuda:
                t.record_stream(self._s)

    def wait(self, ev: Event) -> None:
        if isinstance(ev, _CudaEvent):
            self._s.wait_event(ev._ev)
        else:  # work done on the host: nothing to wait for on the device
            ev.synchronize()


class _CudaGraph(Graph):
    def __init__(self, g: torch.cuda.CUDAGraph, outputs: Any):
        self._g, self.outputs = g, outputs

    def replay(self) -> Any:
        self._g.replay()
        return self.outputs


@functools.cache
def _launch_host_func():
    """The driver's ``cuLaunchHostFunc(CUstream, CUhostFn, void*) -> CUresult`` (libcuda.so.1, the one
    driver every CUDA runtime in the process shares, so torch's stream handles are its streams)."""
    f = ctypes.CDLL("libcuda.so.1").cuLaunchHostFunc
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return f


class CudaDevice(Device):
    def __init__(self, name: str = "cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(
                "CUDA is not available to torch (torch.cuda.is_available() is False)"
            )
        dev = torch.device(name)
        self.name = str(
            dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())
        )
        self._dev = torch.device(self.name)
        self.copy = _CudaStream(self._dev)
        self.compute = _CudaStream(self._dev)
        self._pool = None  # the memory pool of shared captures (``capture``)

    def mem_get_info(self) -> tuple[int, int]:
        free, total = torch.cuda.mem_get_info(self._dev)
        return int(free), int(total)

    def to_host(self, tensors: list) -> Event:
        """Non-blocking copies into page-locked host tensors on the current stream, then an event."""
        out = []
        for t in tensors:
            h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            h.copy_(t, non_blocking=True)
            out.append(h)
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self._dev))
        return _CudaEvent(ev, out)

    def mark(self) -> Event:
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self._dev))
        return _CudaEvent(ev, None)

    def host_func(self, branch) -> None:
        """cuLaunchHostFunc on the current stream: the branch's C++ runs on the driver's callback thread
        once the stream's work so far is done (no Python, no CUDA call in it); a host node when captured."""
        stream = torch.cuda.current_stream(self._dev).cuda_stream
        err = _launch_host_func()(stream, branch.call_address(), branch.address())
        if err != 0:
            raise RuntimeError(f"cuLaunchHostFunc failed (CUresult {err})")

    def capture(self, fn: Callable[[], Any], shared: bool = False) -> Graph:
        """torch.cuda.graph on a side stream (the device synchronised first); fn's tensors come from
        the graph's own memory pool and stay the graph's (``shared``: one pool for every shared capture,
        so graphs replayed one at a time hold one set of temporaries, not one each)."""
        g = torch.cuda.CUDAGraph()
        pool = None
        if shared:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            pool = self._pool
        with torch.cuda.device(self._dev), torch.cuda.graph(g, pool=pool):
            out = fn()
        return _CudaGraph(g, out)

    def join(self, ev: Event) -> None:
        if isinstance(ev, _CudaEvent):
            torch.cuda.current_stream(self._dev).wait_event(ev._ev)
        else:
            ev.synchronize()

    def synchronize(self) -> None:
        torch.cuda.synchronize(self._dev)
