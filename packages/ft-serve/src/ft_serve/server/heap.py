"""The server process's Python heap and its garbage collector.

When the model has loaded, ~200 k Python objects are alive for good (modules, torch and transformers
internals, the model's tensors and layers). Each full (generation 2) collection walks all of them: 80-130 ms
on a Zen 5 core, during which no Python thread runs, so every stream stalls. ``freeze_loaded_heap`` moves
what is alive after loading out of the collector's generations (``gc.freeze``), so a full collection walks
only what serving made since. Measured with the demo model, 400 streamed chat requests four at a time: `ft
serve` made one full collection of 80 ms while serving without it, none with it (its own collection at
start, before the ready line, takes ~0.1 s); with the client in the server's process (more garbage), two of
98 and 129 ms without it, one of 14 ms with it. Frozen objects are still freed by reference counting; only
a reference cycle among them that becomes garbage later would stay, and what is frozen lives as long as the
server (the engine, its weights and modules).

``GcPauses`` records every collection's pause by generation for ``/metrics``.
"""

from __future__ import annotations

import gc
import time


def freeze_loaded_heap() -> int:
    """Collect once, then freeze every object the collector tracks. Called by ``serve`` after the engine has
    loaded and before the first request; not by in-process test servers (it would keep every earlier test's
    objects out of collection). Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GcPauses:
    """Collections and the seconds they held the interpreter, by generation (0, 1, 2), since the first
    ``install``: one process-wide recorder, since ``gc.callbacks`` is process-wide."""

    _shared: GcPauses | None = None

    def __init__(self):
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._t0 = 0.0

    @classmethod
    def install(cls) -> GcPauses:
        """The process's recorder, its callback added to ``gc.callbacks`` on the first call."""
        if cls._shared is None:
            cls._shared = cls()
            gc.callbacks.append(cls._shared._callback)
        return cls._shared

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        g = info["generation"]
        self.count[g] += 1
        self.seconds[g] += time.perf_counter() - self._t0
