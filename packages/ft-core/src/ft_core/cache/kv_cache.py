"""Paged KV cache: fixed-size pages in one pool per layer, a page table per sequence.

Pages are reference counted: a page may be held by any number of sequences and by the prefix cache
(``cache/radix.py``); it returns to the free list when the last holder drops it. When the free list
runs short, ``reserve`` first asks ``reclaim`` (the prefix cache's LRU eviction) for pages.

Legend: P = pages, S = page size (tokens), K = KV heads, Dk/Dv = key/value dims.
A layer with ``v_dim == 0`` keeps keys only (MLA keeps its compressed latent as the "key").
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ft_core.errors import RequestError


@dataclass(frozen=True)
class KVLayout:
    num_pages: int
    page_size: int
    kv_heads: int
    k_dim: int
    v_dim: int
    dtype: torch.dtype


def lazy_zeros(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """A zero tensor. On the CPU, fresh anonymous pages (one mapping, kept alive by the tensor) that the OS
    zero-fills as they are first touched: a pool costs resident memory only for the pages sequences write,
    not its whole size at start-up (a 48-layer model's default 1 GiB pool was all resident before any
    request)."""
    n = math.prod(shape) * dtype.itemsize
    if torch.device(device).type != "cpu" or n == 0:
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.frombuffer(mmap.mmap(-1, n), dtype=torch.uint8).view(dtype).view(shape)


class PagedKVCache:
    """One K pool [P, S, K, Dk] (and V pool [P, S, K, Dv]) per layer; pages allocated per sequence."""

    def __init__(self, layouts: list[KVLayout], device: torch.device | str = "cpu"):
        assert len({(l.num_pages, l.page_size) for l in layouts}) == 1, (
            "layers share one page geometry"
        )
        self.page_size = layouts[0].page_size
        self.num_pages = layouts[0].num_pages
        self.k = [
            lazy_zeros((l.num_pages, l.page_size, l.kv_heads, l.k_dim), l.dtype, device)
            for l in layouts
        ]
        self.v = [
            lazy_zeros((l.num_pages, l.page_size, l.kv_heads, l.v_dim), l.dtype, device)
            if l.v_dim
            else None
            for l in layouts
        ]
        self._free = list(range(self.num_pages - 1, -1, -1))
        self.refs = [
            0
        ] * self.num_pages  # holders of each page (sequences' tables and the prefix cache)
        self.tables: dict[int, list[int]] = {}
        self.reclaim: Callable[[int], int] | None = (
            None  # frees up to n unused cached pages; returns how many
        )

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    def reserve(self, seq: int, total_tokens: int) -> None:
        """Grow sequence ``seq``'s page table to hold ``total_tokens``; raises RequestError when full."""
        table = self.tables.setdefault(seq, [])
        need = self.pages_for(total_tokens) - len(table)
        if need > len(self._free) and self.reclaim is not None:
            self.reclaim(need - len(self._free))
        if need > len(self._free):
            raise RequestError(
                f"KV cache full: sequence needs {need} more pages of {self.page_size} tokens, {len(self._free)} free "
                f"of {self.num_pages}"
            )
        for _ in range(max(need, 0)):
            page = self._free.pop()
            self.refs[page] = 1
            table.append(page)

    def adopt(self, seq: int, pages: list[int]) -> None:
        """Start sequence ``seq``'s (empty) page table with shared ``pages`` (one more reference each)."""
        assert not self.tables.get(seq), "adopt() starts a page table"
        for p in pages:
            self.ref(p)
        self.tables[seq] = list(pages)

    def share(self, seq: int, pages: list[int]) -> None:
        """Point the first ``len(pages)`` entries of ``seq``'s table at ``pages`` (same contents, e.g. the
        prefix cache's copy); the sequence's own duplicates lose its reference."""
        table = self.tables[seq]
        for i, p in enumerate(pages):
            if table[i] != p:
                self.ref(p)
                self.unref(table[i])
                table[i] = p

    def ref(self, page: int) -> None:
        assert self.refs[page] > 0, f"page {page} is free"
        self.refs[page] += 1

    def unref(self, page: int) -> int:
        """Drop one reference; returns 1 when the page went back to the free list, else 0."""
        assert self.refs[page] > 0, f"page {page} is already free"
        self.refs[page] -= 1
        if self.refs[page]:
            return 0
        self._free.append(page)
        return 1

    def free(self, seq: int) -> None:
        """Drop sequence ``seq``'s references (its page table is removed; shared pages stay held)."""
        for page in reversed(self.tables.pop(seq, [])):
            self.unref(page)

    def slot(self, seq: int, position: int) -> int:
        """Flat slot index page * S + offset of one position of sequence ``seq`` (``slots`` for one int)."""
        S = self.page_size
        return self.tables[seq][position // S] * S + position % S

    def slots(self, seq: int, positions: torch.Tensor) -> torch.Tensor:
        """Flat slot index page * S + offset for each position [T] of one sequence."""
        table = torch.tensor(self.tables[seq], dtype=torch.int64)
        return table[positions // self.page_size] * self.page_size + positions % self.page_size

    def write(
        self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None
    ) -> None:
        """Store k [T, K, Dk] (and v [T, K, Dv]) at flat ``slots`` [T]."""
        kp, vp = (
            self.k[layer],
            self.v[layer],
        )  # index_copy_: one op (an indexed assignment is several)
        kp.view(-1, *kp.shape[2:]).index_copy_(0, slots, k.to(kp.dtype))
        if v is not None:
            vp.view(-1, *vp.shape[2:]).index_copy_(0, slots, v.to(vp.dtype))

    def gather(
        self, layer: int, page_table: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """page_table [B, Pmax] -> k [B, Pmax*S, K, Dk], v [B, Pmax*S, K, Dv] (or None)."""
        B = page_table.shape[0]
        k = self.k[layer][page_table].reshape(B, -1, *self.k[layer].shape[2:])
        v = self.v[layer]
        if v is not None:
            v = v[page_table].reshape(B, -1, *v.shape[2:])
        return k, v

    def compact(self, num_pages: int) -> dict[int, int]:
        """Rebuild the pools with ``num_pages`` pages, moving every held page (refs > 0) to the front in
        its old order; page tables are rewritten. Returns {old page: new page} for other holders (the
        prefix tree) to rewrite theirs. The caller makes sure the held pages fit (see memory.resize)."""
        live = [p for p in range(self.num_pages) if self.refs[p] > 0]
        assert len(live) <= num_pages, f"{len(live)} held pages do not fit {num_pages}"
        mapping = {p: i for i, p in enumerate(live)}
        idx = torch.tensor(live, dtype=torch.int64)

        def rebuild(pool: torch.Tensor) -> torch.Tensor:
            new = lazy_zeros((num_pages, *pool.shape[1:]), pool.dtype, pool.device)
            new[: len(live)] = pool[idx.to(pool.device)]
            return new

        self.k = [rebuild(k) for k in self.k]
        self.v = [None if v is None else rebuild(v) for v in self.v]
        self.refs = [self.refs[p] for p in live] + [0] * (num_pages - len(live))
        self.tables = {s: [mapping[p] for p in t] for s, t in self.tables.items()}
        self._free = list(range(num_pages - 1, len(live) - 1, -1))
        self.num_pages = num_pages
        return mapping
