"""Prefix state cache of hybrid models: checkpoints of the complete recurrent state on radix nodes.

A recurrent layer's state compresses the whole prefix and cannot be cut, so a request may resume
only where a checkpoint of every linear layer's state exists; the full-attention KV pages of the
radix tree are reused up to exactly that point. A checkpoint at position p (the state after ids[:p])
lives on the node of depth d = p // S (S = page size; the root for p < S) and carries the r = p % S
ids after that node (``tail``) plus a reference on the KV page that holds those r tokens, so a
checkpoint can sit at any token, not only at page ends. Checkpoints take slots of their own
``StatePool`` (the budget, apart from the KV pool) and are evicted by LRU weighted with the tokens a
checkpoint saves (GreedyDual: each use credits a checkpoint with the current clock L; the one with
the least L_used + gain goes, and L rises to that value; with equal gains this is plain LRU). The
gain is the distance to the next shallower checkpoint on its path, so a dense run of checkpoints
thins out before a lone one far from any other. A lookup uses every checkpoint that is a prefix of
the request (not only the one restored) and a request's new checkpoints take its lookup's clock: the
checkpoints of live conversations stay, those of edited-away branches age out.
Evicting one also frees the KV pages that no checkpoint needs any more (unlocked leaves without a
checkpoint below them); the KV of nodes that deeper checkpoints still need stays.

    cache = StateCheckpoints(tree, kv, StatePool(layout, slots))
    node, ck, stamp = cache.match(ids)                # deepest valid checkpoint (or None), request stamp
    slot = cache.alloc(); ...forward fills it...; cache.add(node, tail, slot, page, stamp)
"""

from __future__ import annotations

import itertools

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.radix import RadixCache, RadixNode
from ft_core.cache.state_store import StatePool


class Checkpoint:
    """The recurrent state after the ids of ``node``'s path plus ``tail`` (``pos`` ids in all); ``slot`` in
    the checkpoint pool; ``page`` holds the KV of the tail tokens (None when the tail is empty);
    ``last_use``: (the eviction clock, the request counter) at its last use."""

    __slots__ = ("node", "tail", "slot", "page", "last_use", "pos")

    def __init__(
        self,
        node: RadixNode,
        tail: tuple[int, ...],
        slot: int,
        page: int | None,
        now: tuple[float, int],
        pos: int,
    ):
        self.node, self.tail, self.slot, self.page, self.last_use, self.pos = (
            node,
            tail,
            slot,
            page,
            now,
            pos,
        )


class StateCheckpoints:
    def __init__(self, tree: RadixCache, kv: PagedKVCache, pool: StatePool):
        self.tree, self.kv, self.pool, self.S = tree, kv, pool, kv.page_size
        self.all: set[Checkpoint] = set()
        self.clock = 0.0  # GreedyDual's L: rises to the priority of each evicted checkpoint
        self._requests = itertools.count(
            1
        )  # breaks ties between equal priorities: least recently used first
        self.created = self.evicted = 0
        tree.drop_payload = self._drop_node

    @property
    def count(self) -> int:
        return len(self.all)

    def _now(self) -> tuple[float, int]:
        return self.clock, next(self._requests)

    def match(self, ids: list[int]) -> tuple[RadixNode, Checkpoint | None, tuple[float, int]]:
        """The deepest checkpoint whose prefix equals ids[:p] with p <= len(ids) - 1 (at least one id is
        left to compute), its node ((root, None) when there is none) and the request's stamp, which
        every checkpoint that is a prefix of ``ids`` takes (LRU)."""
        S, node, best, best_p = self.S, self.tree.root, (self.tree.root, None), -1
        limit, now = len(ids) - 1, self._now()
        d = 0
        while True:
            for ck in (node.payload or {}).values():
                p = d * S + len(ck.tail)
                if p <= limit and tuple(ids[d * S : p]) == ck.tail:
                    ck.last_use = now
                    if p > best_p:
                        best, best_p = (node, ck), p
            if (d + 1) * S > limit:
                break
            child = node.children.get(tuple(ids[d * S : (d + 1) * S]))
            if child is None:
                break
            node, d = child, d + 1
        return (*best, now)

    def has(self, node: RadixNode, tail: tuple[int, ...]) -> bool:
        return bool(node.payload) and tail in node.payload

    def exists(self, ids: list[int], pos: int) -> bool:
        """A checkpoint after exactly ids[:pos] is held."""
        d = pos // self.S
        node = self.tree.match_node(ids, max_pages=d)
        return node.depth == d and self.has(node, tuple(ids[d * self.S : pos]))

    def alloc(self) -> int | None:
        """A free checkpoint slot, evicting the least recently used checkpoint when the pool is full;
        None when the pool has no slot at all (budget 0 or every slot being filled this step)."""
        slot = self.pool.alloc()
        if slot is None and self.all:
            self._evict_one()
            slot = self.pool.alloc()
        return slot

    def _evict_one(self) -> None:
        prio = self.priorities()
        victim = min(self.all, key=lambda c: (prio[c], c.last_use[1], c.pos))
        self.clock = max(self.clock, prio[victim])
        self.drop(victim)
        self.evicted += 1

    @property
    def num_slots(self) -> int:
        return self.pool.num_slots

    @property
    def nbytes(self) -> int:
        return self.pool.nbytes

    def remap_pages(self, mapping: dict[int, int]) -> None:
        """The KV pool was compacted (``PagedKVCache.compact``): rewrite the tail pages' ids."""
        for ck in self.all:
            if ck.page is not None:
                ck.page = mapping[ck.page]

    def resize(self, nbytes: int) -> dict:
        """A new budget of ``nbytes`` (whole slots): the most valuable checkpoints that fit are kept, copied
        into a new pool. Call between steps (no slot is being filled)."""
        slots, before, evicted = (
            nbytes // self.pool.layout.bytes_per_slot,
            self.pool.num_slots,
            self.evicted,
        )
        while len(self.all) > slots:
            self._evict_one()
        old, self.pool = self.pool, StatePool(self.pool.layout, slots, self.pool.device)
        for ck in self.all:
            slot = self.pool.alloc()
            old.copy_to(ck.slot, self.pool, slot)
            ck.slot = slot
        return {
            "slots_before": before,
            "slots_after": slots,
            "kept": len(self.all),
            "evicted": self.evicted - evicted,
        }

    def priorities(self) -> dict[Checkpoint, float]:
        """GreedyDual priority of every checkpoint: its last use + the tokens it saves over the next
        shallower checkpoint on its path (``gain``)."""
        return {c: c.last_use[0] + self.gain(c) for c in self.all}

    def gain(self, ck: Checkpoint) -> int:
        p = self.shallower(ck)
        return ck.pos - (p.pos if p is not None else 0)

    def shallower(self, ck: Checkpoint) -> Checkpoint | None:
        """The deepest other checkpoint that is a proper prefix of ``ck``'s ids (None: none)."""
        best, node, nxt = None, ck.node, ck.tail  # nxt: the ids right after ``node`` on ck's path
        while node is not None:
            for c in (node.payload or {}).values():
                if (
                    c is not ck
                    and c.pos < ck.pos
                    and nxt[: len(c.tail)] == c.tail
                    and (best is None or c.pos > best.pos)
                ):
                    best = c
            if best is not None:
                return best  # shallower nodes only hold shallower checkpoints
            node, nxt = node.parent, node.key
        return None

    def add(
        self,
        node: RadixNode,
        tail: tuple[int, ...],
        slot: int,
        page: int | None,
        stamp: tuple[float, int] | None = None,
    ) -> Checkpoint | None:
        """Register the state in ``slot`` (filled by a forward) as the checkpoint after node's path + tail.
        ``page``: the KV page holding the tail tokens (one more reference is taken); ``stamp``: of the
        request that made it (default: now). A duplicate frees the slot and returns None."""
        if self.has(node, tail):
            self.pool.free(slot)
            return None
        if node.payload is None:
            node.payload = {}
        if page is not None:
            self.kv.ref(page)
        now = self._now() if stamp is None else stamp
        ck = node.payload[tail] = Checkpoint(
            node, tail, slot, page, now, node.depth * self.S + len(tail)
        )
        self.all.add(ck)
        self.created += 1
        return ck

    def drop(self, ck: Checkpoint) -> None:
        """Evict ``ck``: its slot and tail page go back; KV pages no other checkpoint needs are freed."""
        node = ck.node
        self._release(ck)
        del node.payload[ck.tail]
        if not node.payload:
            node.payload = None
        self.prune(node)

    def prune(self, node: RadixNode) -> int:
        """Free the KV of ``node`` and its ancestors while each is an unlocked leaf without checkpoints:
        for a hybrid model a prefix without a checkpoint at or below it can never be resumed."""
        freed = 0
        while (
            node is not self.tree.root
            and node.parent is not None
            and not node.children
            and node.lock == 0
            and not node.payload
        ):
            parent = node.parent
            freed += self.tree.remove_leaf(node)
            node = parent
        return freed

    def _release(self, ck: Checkpoint) -> int:
        self.all.discard(ck)
        self.pool.free(ck.slot)
        return self.kv.unref(ck.page) if ck.page is not None else 0

    def _drop_node(self, node: RadixNode) -> int:
        """The KV LRU drops ``node``: its checkpoints go with it. Returns the tail pages freed."""
        freed = sum(self._release(ck) for ck in node.payload.values())
        self.evicted += len(node.payload)
        return freed
