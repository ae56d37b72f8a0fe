"""``MemoryPools``: exactly what the MemoryManager sizes and resizes, built by the engine and handed
in (the manager never sees the Engine): the paged KV cache and the prefix tree over it, the expert
cache (None without one), the recurrent-state checkpoints (None for models without them), and the
byte sizes and context limit the split is computed from.
"""

from __future__ import annotations

from dataclasses import dataclass

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.radix import RadixCache
from ft_core.cache.state_cache import StateCheckpoints
from ft_core.experts.cached import CachedBackend


@dataclass(frozen=True)
class MemoryPools:
    kv: PagedKVCache  # resized in place (``cache/kv_resize.py``)
    prefix: RadixCache | None  # the prefix tree over ``kv`` (its page ids are rewritten)
    experts: CachedBackend | None  # the expert cache (None: moe_backend "cpu" or a dense model)
    states: StateCheckpoints | None  # recurrent-state checkpoints of hybrids (None: none kept)
    kv_bytes_per_token: int  # KV bytes of one token over every layer (0: every layer keeps state)
    slot_bytes: int  # bytes of one expert slot (one flat id of the bank; 0 for dense models)
    max_model_len: int  # tokens of the longest request: the KV pool must hold one

    @property
    def page_bytes(self) -> int:
        return self.kv_bytes_per_token * self.kv.page_size
