"""Resize the paged KV pool at run time: evict least recently used prefix-cache pages that no request
holds until the held pages fit, compact them to the front of new pools, and rewrite the page ids of
the prefix tree. Pages held by requests always survive."""

from __future__ import annotations

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.radix import RadixCache
from ft_core.cache.state_cache import StateCheckpoints


def resize_kv(
    kv: PagedKVCache, tree: RadixCache | None, states: StateCheckpoints | None, num_pages: int
) -> dict:
    """Rebuild ``kv`` (mutated) with ``num_pages`` pages; ``tree`` (the prefix cache over it) and
    ``states`` (checkpoints holding the KV page of their tail) get the new page ids. Returns
    {"pages", "kept", "evicted"}. The caller has checked that the pages held by sequences fit."""
    held = sum(1 for r in kv.refs if r > 0)
    evicted = 0
    if held > num_pages and tree is not None:
        evicted = tree.evict(held - num_pages)
        held -= evicted
    if held > num_pages:
        raise AssertionError(f"{held} held pages after eviction do not fit {num_pages}")
    mapping = kv.compact(num_pages)
    if tree is not None:
        stack = list(tree.root.children.values())
        while stack:
            n = stack.pop()
            n.page = mapping[n.page]
            stack.extend(n.children.values())
    if states is not None:  # hybrids: checkpoints hold the KV page of their tail
        states.remap_pages(mapping)
    return {"pages": num_pages, "kept": held, "evicted": evicted}
