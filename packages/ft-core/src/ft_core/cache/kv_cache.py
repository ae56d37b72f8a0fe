"""Paged KV cache: fixed-size pages in one pool per layer, a page table per sequence.

Legend: P = pages, S = page size (tokens), K = KV heads, Dk/Dv = key/value dims.
A layer with ``v_dim == 0`` keeps keys only (MLA keeps its compressed latent as the "key").
"""

from __future__ import annotations

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


class PagedKVCache:
    """One K pool [P, S, K, Dk] (and V pool [P, S, K, Dv]) per layer; pages allocated per sequence."""

    def __init__(self, layouts: list[KVLayout], device: torch.device | str = "cpu"):
        assert len({(l.num_pages, l.page_size) for l in layouts}) == 1, "layers share one page geometry"
        self.page_size = layouts[0].page_size
        self.num_pages = layouts[0].num_pages
        self.k = [torch.zeros(l.num_pages, l.page_size, l.kv_heads, l.k_dim, dtype=l.dtype, device=device) for l in layouts]
        self.v = [
            torch.zeros(l.num_pages, l.page_size, l.kv_heads, l.v_dim, dtype=l.dtype, device=device) if l.v_dim else None
            for l in layouts
        ]
        self._free = list(range(self.num_pages - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    def reserve(self, seq: int, total_tokens: int) -> None:
        """Grow sequence ``seq``'s page table to hold ``total_tokens``; raises RequestError when full."""
        table = self.tables.setdefault(seq, [])
        need = self.pages_for(total_tokens) - len(table)
        if need > len(self._free):
            raise RequestError(
                f"KV cache full: sequence needs {need} more pages of {self.page_size} tokens, {len(self._free)} free "
                f"of {self.num_pages}"
            )
        for _ in range(max(need, 0)):
            table.append(self._free.pop())

    def free(self, seq: int) -> None:
        self._free.extend(reversed(self.tables.pop(seq, [])))

    def slots(self, seq: int, positions: torch.Tensor) -> torch.Tensor:
        """Flat slot index page * S + offset for each position [T] of one sequence."""
        table = torch.tensor(self.tables[seq], dtype=torch.int64)
        return table[positions // self.page_size] * self.page_size + positions % self.page_size

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None) -> None:
        """Store k [T, K, Dk] (and v [T, K, Dv]) at flat ``slots`` [T]."""
        self.k[layer].view(-1, *self.k[layer].shape[2:])[slots] = k.to(self.k[layer].dtype)
        if v is not None:
            self.v[layer].view(-1, *self.v[layer].shape[2:])[slots] = v.to(self.v[layer].dtype)

    def gather(self, layer: int, page_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """page_table [B, Pmax] -> k [B, Pmax*S, K, Dk], v [B, Pmax*S, K, Dv] (or None)."""
        B = page_table.shape[0]
        k = self.k[layer][page_table].reshape(B, -1, *self.k[layer].shape[2:])
        v = self.v[layer]
        if v is not None:
            v = v[page_table].reshape(B, -1, *v.shape[2:])
        return k, v
