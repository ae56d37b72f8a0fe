"""Automatic elasticity: watch the device's free memory and shrink the budget when another program
takes memory, grow it back when that memory is released, with hysteresis so it does not thrash.

    policy = ElasticPolicy(max_total=8 << 30, reserve=1 << 30)
    new_total = policy.decide(free_bytes, current_total)   # None: leave it

Free-memory sources: ``torch_cuda_source(device)`` (cudaMemGetInfo) and ``file_source(path)`` (an
integer byte count in a file: simulates a GPU on machines without one, for tests and demos).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class ElasticPolicy:
    """Keep ``reserve`` bytes of the device free for other programs. Shrink at once when free memory
    drops below ``reserve``; grow only after ``patience`` consecutive polls with more than ``reserve +
    hysteresis`` free, and never past ``max_total`` (the budget at start-up) nor below ``min_total``."""

    max_total: int
    reserve: int
    hysteresis: int = 256 << 20
    patience: int = 3
    min_total: int = 0
    _calm: int = 0

    def decide(self, free: int, total: int) -> int | None:
        if free < self.reserve:  # someone took memory: give back what they need, now
            self._calm = 0
            new = max(self.min_total, total - (self.reserve - free))
            return new if new < total else None
        if free > self.reserve + self.hysteresis and total < self.max_total:
            self._calm += 1
            if self._calm >= self.patience:  # released for long enough: grow back
                self._calm = 0
                new = min(self.max_total, total + (free - self.reserve))
                return new if new > total else None
            return None
        self._calm = 0
        return None


def torch_cuda_source(device: str = "cuda"):
    import torch

    def free() -> int:
        return int(torch.cuda.mem_get_info(torch.device(device))[0])

    return free


def file_source(path: str | Path):
    """Free bytes read from a file (re-read at every poll; the last good value while it is being rewritten)."""
    path = Path(path)
    last = [None]

    def free() -> int:
        try:
            last[0] = int(path.read_text().strip())
        except (OSError, ValueError):
            if last[0] is None:
                raise
        return last[0]

    return free
