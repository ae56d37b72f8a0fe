"""Append tensors to FTW shards: aligned offsets, bounded shard size, per-chunk checksums.

A shard grows until the next tensor would pass ``shard_bytes``; a bank tensor's rows are split
across shards to fit (whole rows), a dense tensor larger than the bound gets a shard of its own.
Each tensor starts at a multiple of ``ALIGN`` and the gap before it is zeros.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ft_core.loader.ftw_format import (
    ALIGN,
    CHUNK,
    DTYPE_NAMES,
    SHARD_SUFFIX,
    Entry,
    align_up,
    checksum,
)


def tensor_bytes(t: torch.Tensor):
    """A read-only byte view (numpy uint8) of a tensor's data, copying only if it is not contiguous."""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy()


class ShardWriter:
    """Writes tensors into ``directory/model-NNNNN.ftw``; ``entries`` and ``shards`` describe them."""

    def __init__(self, directory: Path, shard_bytes: int):
        if shard_bytes < ALIGN:
            raise ValueError(f"shard size {shard_bytes} is below the {ALIGN}-byte alignment")
        self.dir, self.shard_bytes = directory, shard_bytes
        self.entries: list[Entry] = []
        self.shards: dict[str, int] = {}
        self._f = None
        self._name = ""
        self._pos = 0

    def add_dense(self, name: str, t: torch.Tensor) -> None:
        """Store ``t`` whole under ``name``; its bytes and dtype are kept as they are."""
        n = t.numel() * t.element_size()
        if self._f is None or (self._pos and align_up(self._pos) + n > self.shard_bytes):
            self._next_shard()
        self._write(name, "dense", t, None)

    def add_rows(self, name: str, t: torch.Tensor, base: int) -> None:
        """Store ``t`` [n, ...] as rows ``[base, base + n)`` of bank tensor ``name``, split across shards
        by whole rows where the shard bound requires."""
        row = t[0].numel() * t.element_size() if t.shape[0] else 0
        a = 0
        while a < t.shape[0]:
            if self._f is None:
                self._next_shard()
            room = self.shard_bytes - align_up(self._pos)
            n = min(t.shape[0] - a, room // row if row else t.shape[0])
            if n <= 0 and self._pos:
                self._next_shard()
                continue
            n = max(n, 1)
            self._write(name, "bank", t[a : a + n], (base + a, base + a + n))
            a += n

    def close(self) -> None:
        """Pad the last shard to the alignment, flush and fsync it."""
        if self._f is not None:
            self._finish()

    def _next_shard(self) -> None:
        if self._f is not None:
            self._finish()
        self._name = f"model-{len(self.shards) + 1:05d}{SHARD_SUFFIX}"
        self._f = open(self.dir / self._name, "wb")
        self._pos = 0
        self.shards[self._name] = 0

    def _finish(self) -> None:
        self._pad(align_up(self._pos))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self.shards[self._name] = self._pos
        self._f = None

    def _pad(self, to: int) -> None:
        if to > self._pos:
            self._f.write(bytes(to - self._pos))
            self._pos = to

    def _write(self, name: str, kind: str, t: torch.Tensor, rows: tuple[int, int] | None) -> None:
        self._pad(align_up(self._pos))
        data = tensor_bytes(t)
        sums = tuple(checksum(data[i : i + CHUNK]) for i in range(0, len(data), CHUNK))
        self._f.write(data)
        self.entries.append(
            Entry(
                name,
                kind,
                tuple(t.shape),
                DTYPE_NAMES[t.dtype],
                self._name,
                self._pos,
                len(data),
                sums,
                rows,
            )
        )
        self._pos += len(data)
        self.shards[self._name] = self._pos
