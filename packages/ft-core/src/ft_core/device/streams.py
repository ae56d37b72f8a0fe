"""The device interface of the expert hierarchy: ordered work queues ("streams"), events, and the
memory questions the cache asks (DESIGN §3). The orchestration in experts/cached.py is written once
against it and runs on two implementations:

  CpuDevice    every stream a worker thread that runs its closures in order (the CI stand-in; the
               "device" memory is host memory). ``delay`` puts a random sleep before each copy-stream
               task, so tests can force every interleaving the ordering rules allow.
  CudaDevice   torch.cuda streams and events (device/cuda.py): a closure's kernels are launched on
               the stream from the calling thread and run asynchronously.

Semantics shared by both (the contract the orchestration relies on, and all it may rely on):
  ``stream.run(fn) -> Event``  fn's work is ordered after everything run on that stream before, and
                               after every event the stream was told to ``wait`` for; the Event is
                               done when fn's work is. fn's return value is ``event.result()``
                               (CpuDevice: the value; CudaDevice: the value, whose tensors are ready
                               only once the event is done).
  ``stream.wait(ev)``          later work on the stream starts after ``ev`` is done (no host wait).
  ``ev.synchronize()``         the host waits for ``ev``; an exception raised by fn is raised here.
  ``stream.follow_current()``  later work on the stream starts after the caller's queued work (the
                               activations the dense layers made on the device's default stream).
  ``device.to_host(ts) -> Event`` copies of small tensors to the host, queued behind the caller's
                               work; the Event's result is the host tensors, whose values are there
                               once the Event is synchronized (CUDA: not before).
  ``device.join(ev)``          the caller's later work starts after ``ev`` (CUDA: on the device, the
                               host goes on; the stand-in: the host waits).
  ``device.mark() -> Event``   done once the caller's work queued so far is.
  ``device.host_func(branch)`` a C++ host function queued on the caller's stream: it runs after the
                               caller's work so far, later work waits for it, the host goes on (CUDA:
                               cudaLaunchHostFunc, a host node when captured; the stand-in: run now,
                               the caller's thread being its stream).
  ``device.capture(fn)``       fn's stream work recorded for ``replay`` on the caller's current
                               stream (CUDA: a CUDA graph, fn run once while capturing; its outputs
                               are the graph's, refreshed by each replay). The stand-in runs fn at
                               each replay and writes its outputs into those of the first replay,
                               so callers see the same reuse of output tensors.
"""

from __future__ import annotations

import queue
import random
import threading
from abc import ABC, abstractmethod
from typing import Any, Callable


class Event(ABC):
    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until the work before this event is done; re-raise its exception."""

    @abstractmethod
    def result(self) -> Any:
        """The return value of the closure this event follows (after ``synchronize``)."""


class Stream(ABC):
    @abstractmethod
    def run(self, fn: Callable[[], Any]) -> Event: ...

    @abstractmethod
    def wait(self, ev: Event) -> None: ...

    def follow_current(self) -> None:
        """Later work on this stream starts after what the caller queued so far on its own current
        stream (CUDA: the dense layers' kernels that made this step's activations). Host work is done
        when it returns, so the CPU stand-in has nothing to wait for."""

    def uses(self, *tensors) -> None:
        """Work queued on this stream reads ``tensors``, made on another stream: their memory is not
        handed out again until that work is done, even once the caller drops them (CUDA:
        ``record_stream``; the stand-in frees nothing early)."""


class Graph(ABC):
    outputs: Any = None  # what fn returned when captured (the stand-in: after the first replay)

    @abstractmethod
    def replay(self) -> Any:
        """Queue the captured work again on the caller's current stream; returns ``outputs``."""


class Device(ABC):
    """One accelerator as the expert hierarchy sees it: where slots live, a copy stream for fills
    and prefetches, a compute stream for the slot GEMM, and its memory."""

    name: str  # torch device string of the slots and tables ("cpu", "cuda:0")
    copy: Stream
    compute: Stream

    @abstractmethod
    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory."""

    def to_host(self, tensors: list) -> Event:
        """Copies of ``tensors`` (small: routes, counters, a few activation rows) in host memory, queued
        behind the caller's work so far and nothing after it; the Event's result is the list of host
        tensors. The stand-in's tensors are on the host already: the list itself, handed out only
        after ``synchronize`` (a GPU's copies are not there before: reading them early is an error
        here too, so CI catches it)."""
        return _Strict(list(tensors))

    def join(self, ev: Event) -> None:
        """The caller's later work (its current stream) starts after ``ev``: on a GPU the device waits
        and the host goes on; on the stand-in the host waits."""
        ev.synchronize()

    def mark(self) -> Event:
        """An Event done once the work the caller queued so far is done (the stand-in: at once)."""
        return done()

    def host_func(self, branch) -> None:
        """Queue ``branch`` (an ``ft_kernels.HostBranch``) on the caller's current stream (module
        docstring). The stand-in runs it at once: the caller's queued work is done already."""
        branch.run()

    def capture(self, fn: Callable[[], Any], shared: bool = False) -> Graph:
        """``fn``'s stream work, recorded for replay (module docstring). fn may only queue work: no host
        reads of device values; other streams only after they ``follow_current`` and joined back
        (``join``) before fn returns (a whole decode step's MoE steps). ``shared``: its memory from
        one pool shared by every ``shared`` capture of this device (graphs never replayed at once)."""
        return _Replayed(fn)

    def synchronize(self) -> None:
        """Wait until every stream is idle."""
        for s in (self.copy, self.compute):
            s.run(lambda: None).synchronize()

    def close(self) -> None:
        """Release the streams' resources (threads); the device may not be used after."""


# ---- the CPU stand-in -------------------------------------------------------------------------
class _Done(Event):
    """An event that is done at once (work that ran on the caller's thread)."""

    def __init__(self, value: Any = None):
        self._value = value

    def synchronize(self) -> None:
        pass

    def result(self) -> Any:
        return self._value


class _Strict(_Done):
    """Done at once, but its value is handed out only once ``synchronize`` was called."""

    def __init__(self, value: Any = None):
        super().__init__(value)
        self._synced = False

    def synchronize(self) -> None:
        self._synced = True

    def result(self) -> Any:
        if not self._synced:
            raise RuntimeError("to_host's copies read before the event was synchronized")
        return self._value


class _Replayed(Graph):
    """The stand-in's graph: fn run at each replay, its outputs copied into the first replay's."""

    def __init__(self, fn: Callable[[], Any]):
        self._fn = fn

    def replay(self) -> Any:
        out = self._fn()
        if self.outputs is None:
            self.outputs = out
        else:
            _copy_into(self.outputs, out)
        return self.outputs


def _copy_into(dst: Any, src: Any) -> None:
    """Copy tensors ``src`` into ``dst`` (a tensor, or tuples / lists of them, alike in shape)."""
    if isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            _copy_into(d, s)
    elif dst is not None:
        dst.copy_(src)


class _ThreadEvent(Event):
    def __init__(self):
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def _set(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()

    def synchronize(self) -> None:
        self._done.wait()
        if self._error is not None:
            raise self._error

    def result(self) -> Any:
        self.synchronize()
        return self._value


class ThreadStream(Stream):
    """A stream as one daemon worker thread taking closures in FIFO order. ``delay`` (seconds, or
    None): a random sleep in [0, delay) before each task (tests). An exception in a task fails its
    own event and every later event of the stream (as a failed CUDA stream would)."""

    def __init__(self, name: str, delay: float | None = None, seed: int = 0):
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._delay, self._rng = delay, random.Random(seed)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=f"ft-{name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, ev = item
            if self._delay:
                threading.Event().wait(self._rng.random() * self._delay)
            if self._error is not None:
                ev._set(error=self._error)
                continue
            try:
                ev._set(fn())
            except BaseException as e:  # noqa: BLE001 -- handed to whoever synchronizes
                self._error = e
                ev._set(error=e)
            # an idle worker holds no task: its closure (and all it reaches) may go
            del item, fn, ev

    def run(self, fn: Callable[[], Any]) -> Event:
        ev = _ThreadEvent()
        self._q.put((fn, ev))
        return ev

    def wait(self, ev: Event) -> None:
        self._q.put((ev.synchronize, _ThreadEvent()))

    def close(self) -> None:
        self._q.put(None)


class CpuDevice(Device):
    """The device tier in host memory, its streams as threads (see the module docstring).
    ``memory``: the (free, total) bytes ``mem_get_info`` reports (default: the host's available
    memory from /proc/meminfo)."""

    def __init__(
        self, delay: float | None = None, seed: int = 0, memory: tuple[int, int] | None = None
    ):
        self.name = "cpu"
        self.copy = ThreadStream("copy", delay, seed)
        self.compute = ThreadStream("compute", None, seed + 1)
        self._memory = memory

    def mem_get_info(self) -> tuple[int, int]:
        if self._memory is not None:
            return self._memory
        info = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                info[k] = int(v.split()[0]) * 1024
        return info.get("MemAvailable", info["MemFree"]), info["MemTotal"]

    def close(self) -> None:
        self.copy.close()
        self.compute.close()


def done(value: Any = None) -> Event:
    """An Event already done, carrying ``value`` (work the caller did itself)."""
    return _Done(value)
