"""Radix tree over token ids at page granularity: which KV pages already hold a given prefix.

Every node below the root is one full page: ``key`` is the page's ``page_size`` token ids and
``page`` the KV page that holds their keys/values (computed after exactly the ids on the path from
the root). Children are keyed by the tuple of their page's tokens, so a lookup walks one page at a
time. The tree holds one reference on each of its pages (``PagedKVCache.ref``); sequences that use a
node lock it (and so its ancestors), and only unlocked leaves are evicted, least recently used first.

    tree = RadixCache(kv)                 # also installs tree.evict as kv.reclaim
    pages, n = tree.match(ids)            # longest cached prefix, whole pages
    node = tree.insert(ids[:k * S], table[:k])
    tree.lock(node); ...; tree.unlock(node)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from ft_core.cache.kv_cache import PagedKVCache


class RadixNode:
    """One cached page. ``payload`` is a hook for state that belongs to the prefix ending here (e.g. a
    recurrent-layer checkpoint, DESIGN §4); the tree keeps it and drops it with the node."""

    __slots__ = ("key", "page", "parent", "children", "lock", "last_use", "payload")

    def __init__(self, key: tuple[int, ...], page: int, parent: RadixNode | None):
        self.key, self.page, self.parent = key, page, parent
        self.children: dict[tuple[int, ...], RadixNode] = {}
        self.lock = 0  # sequences using this node or a descendant
        self.last_use = 0
        self.payload: Any = None

    @property
    def depth(self) -> int:
        """Pages from the root to this node (the root is 0)."""
        d, n = 0, self
        while n.parent is not None:
            d, n = d + 1, n.parent
        return d

    def path(self) -> list[RadixNode]:
        """Nodes from the first page down to this one (empty for the root)."""
        out, n = [], self
        while n.parent is not None:
            out.append(n)
            n = n.parent
        return out[::-1]


class RadixCache:
    def __init__(self, kv: PagedKVCache):
        self.kv, self.page_size = kv, kv.page_size
        self.root = RadixNode((), -1, None)
        self.num_pages = 0  # nodes below the root = KV pages the tree references
        self.evicted_pages = 0
        self._clock = itertools.count(1)
        self._evictable: set[RadixNode] = set()  # unlocked leaves
        # Called with a node that is dropped while holding a payload; returns KV pages that frees besides
        # the node's own page (set by the state-checkpoint cache, cache/state_cache.py).
        self.drop_payload: Callable[[RadixNode], int] | None = None
        kv.reclaim = self.evict

    # ---- lookup ---------------------------------------------------------------------------------
    def match_node(self, ids: list[int], max_pages: int | None = None) -> RadixNode:
        """Deepest node whose path equals the first whole pages of ``ids`` (at most ``max_pages``);
        the root when nothing matches. Marks the path as used (LRU)."""
        S, node, now = self.page_size, self.root, next(self._clock)
        limit = len(ids) // S if max_pages is None else min(max_pages, len(ids) // S)
        for i in range(limit):
            child = node.children.get(tuple(ids[i * S : (i + 1) * S]))
            if child is None:
                break
            node = child
            node.last_use = now
        return node

    def match(self, ids: list[int]) -> tuple[list[int], int]:
        """Longest cached prefix of ``ids`` in whole pages: (its KV pages, its length in tokens)."""
        pages = self.pages(self.match_node(ids))
        return pages, len(pages) * self.page_size

    @staticmethod
    def pages(node: RadixNode) -> list[int]:
        """KV pages of the prefix that ends at ``node``."""
        return [n.page for n in node.path()]

    # ---- update ---------------------------------------------------------------------------------
    def insert(self, ids: list[int], pages: list[int]) -> RadixNode:
        """Add the whole pages of ``ids``; ``pages[i]`` holds tokens ``ids[i*S:(i+1)*S]``. Pages whose
        prefix is already cached are not added (the tree keeps its own page; the caller's copy is freed
        when the caller drops it). New nodes take one reference on their page. Returns the deepest node."""
        S, node, now = self.page_size, self.root, next(self._clock)
        for i in range(min(len(ids) // S, len(pages))):
            key = tuple(ids[i * S : (i + 1) * S])
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = RadixNode(key, pages[i], node)
                self.kv.ref(pages[i])
                self.num_pages += 1
                self._evictable.discard(node)
                self._evictable.add(child)
            node = child
            node.last_use = now
        return node

    def lock(self, node: RadixNode) -> None:
        """A sequence uses the prefix ending at ``node``: neither it nor its ancestors are evicted."""
        while node is not None:
            node.lock += 1
            self._evictable.discard(node)
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        while node is not None:
            assert node.lock > 0, "unlock without lock"
            node.lock -= 1
            if node.lock == 0 and not node.children and node is not self.root:
                self._evictable.add(node)
            node = node.parent

    def evict(self, pages: int) -> int:
        """Drop unlocked leaves, least recently used first, until ``pages`` KV pages went back to the
        free list (or nothing evictable is left). Returns the pages freed."""
        heap = [(n.last_use, id(n), n) for n in self._evictable]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < pages:
            _, _, n = heapq.heappop(heap)
            parent = n.parent
            freed += self.remove_leaf(n)
            self.evicted_pages += 1
            if parent is not self.root and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.last_use, id(parent), parent))
        return freed

    def remove_leaf(self, n: RadixNode) -> int:
        """Drop the unlocked leaf ``n`` now (its payload too); returns the KV pages that went back to the
        free list. Its parent becomes evictable when it is left an unlocked leaf."""
        assert n.parent is not None and not n.children and n.lock == 0, (
            "only unlocked leaves are removed"
        )
        self._evictable.discard(n)
        parent = n.parent
        del parent.children[n.key]
        freed = self.drop_payload(n) if n.payload is not None and self.drop_payload else 0
        n.parent, n.payload = None, None
        self.num_pages -= 1
        freed += self.kv.unref(n.page)
        if parent is not self.root and not parent.children and parent.lock == 0:
            self._evictable.add(parent)
        return freed
