"""A small thread-safe progress bar on stderr (bytes done, GB/s, ETA), shown only on a terminal."""

from __future__ import annotations

import sys
import threading
import time


class Progress:
    """``update(n)`` from any thread; ``close()`` prints the final line. ``enabled=None``: when the
    stream is a terminal. Redraws at most 10 times a second."""

    def __init__(
        self, total: int, desc: str, enabled: bool | None = None, stream=None, width: int = 30
    ):
        self.total, self.desc, self.width = max(int(total), 0), desc, width
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) if enabled is None else enabled
        self.done = 0
        self.start = time.perf_counter()
        self._last = 0.0
        self._lock = threading.Lock()
        self._closed = False

    def update(self, n: int) -> None:
        with self._lock:
            self.done += n
            now = time.perf_counter()
            if self.enabled and now - self._last >= 0.1:
                self._last = now
                self._draw(now, end="")

    def close(self) -> None:
        with self._lock:
            if self.enabled and not self._closed:
                self._draw(time.perf_counter(), end="\n")
            self._closed = True

    def _draw(self, now: float, end: str) -> None:
        dt = max(now - self.start, 1e-9)
        frac = self.done / self.total if self.total else 1.0
        fill = int(self.width * min(frac, 1.0))
        rate = self.done / dt
        eta = (self.total - self.done) / rate if rate > 0 and end == "" else 0.0
        tail = f" ETA {eta:4.0f}s" if end == "" else f" in {dt:.1f}s"
        self.stream.write(
            f"\r{self.desc} [{'#' * fill}{'.' * (self.width - fill)}] {frac * 100:5.1f}% "
            f"{self.done / 1e9:.2f}/{self.total / 1e9:.2f} GB {rate / 1e9:.2f} GB/s{tail}{end}"
        )
        self.stream.flush()
