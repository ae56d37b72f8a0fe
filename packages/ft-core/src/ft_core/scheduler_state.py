"""The scheduler's side of recurrent state (hybrid models): a live state slot per admitted sequence,
restoring the deepest valid checkpoint at admission, choosing which positions of a step to snapshot
and registering the snapshots on the radix tree after the step.

A prompt's snapshot positions come from the ``CheckpointPolicy`` once, when the sequence starts from
scratch (after its restore). The linear layers copy the state after exactly those tokens into
checkpoint slots inside one forward (``StateBatch.snaps``), so prefill chunks need no extra splits.
Decode snapshots follow the tokens the model emits; a finished or preempted sequence leaves its final
state as a checkpoint when the policy keeps ends of turns (or always, when preempted).
"""

from __future__ import annotations

from ft_core.cache.anchors import CheckpointPolicy
from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.radix import RadixCache, RadixNode
from ft_core.cache.state_cache import StateCheckpoints
from ft_core.cache.state_store import StatePool
from ft_core.sequence import Sequence

Snaps = list[
    tuple[int, int]
]  # (position, checkpoint slot): the state after ids[:position] goes into slot


class HybridState:
    def __init__(
        self,
        kv: PagedKVCache,
        live: StatePool,
        ckpts: StateCheckpoints | None,
        policy: CheckpointPolicy,
    ):
        self.kv, self.live, self.ckpts, self.policy = kv, live, ckpts, policy
        self._plans: dict[int, list[int]] = {}  # seq_id -> prompt positions still to snapshot
        self._tails: dict[
            int, tuple[int, int]
        ] = {}  # seq_id -> (KV page, tokens) to copy once admitted
        self._stamps: dict[
            int, tuple[float, int]
        ] = {}  # seq_id -> its lookup's stamp (its checkpoints get it)
        self.restored_hits = 0  # admissions that resumed from a checkpoint
        self.restored_tokens = 0  # tokens those checkpoints covered

    def admit(self, seq: Sequence) -> bool:
        """Give a sequence that starts from scratch a zeroed live slot; False when none is free."""
        if seq.state_slot is None:
            seq.state_slot = self.live.alloc()
        return seq.state_slot is not None

    def restore(self, seq: Sequence) -> RadixNode | None:
        """Resume ``seq`` at the deepest valid checkpoint: adopt the KV pages of its node's path, copy the
        state into the live slot and remember the tail page to copy. Returns the node to lock (None: no
        checkpoint). Sets ``num_computed`` to the checkpoint's position."""
        if self.ckpts is None:
            return None
        node, ck, self._stamps[seq.seq_id] = self.ckpts.match(seq.all_ids)
        if ck is None:
            return None
        pages = RadixCache.pages(node)
        if pages:
            self.kv.adopt(seq.seq_id, pages)
        self.ckpts.pool.copy_to(ck.slot, self.live, seq.state_slot)
        if ck.page is not None:
            self.kv.ref(ck.page)  # pinned until copied into the sequence's own page
            self._tails[seq.seq_id] = (ck.page, len(ck.tail))
        seq.num_computed = len(pages) * self.kv.page_size + len(ck.tail)
        return node

    def admitted(self, seq: Sequence, restored: bool) -> None:
        """The sequence got its pages: copy the restored tail KV and plan the prompt's snapshots."""
        tail = self._tails.pop(seq.seq_id, None)
        if tail is not None:
            page, r = tail
            dst = self.kv.tables[seq.seq_id][seq.num_computed // self.kv.page_size]
            for k, v in zip(self.kv.k, self.kv.v):
                k[dst, :r] = k[page, :r]
                if v is not None:
                    v[dst, :r] = v[page, :r]
            self.kv.unref(page)
        if restored:
            self.restored_hits += 1
            self.restored_tokens += seq.num_computed
        if self.ckpts is not None:
            self._plans[seq.seq_id] = self.policy.prompt_points(seq.all_ids, seq.num_computed)

    def prompt_snaps(self, seq: Sequence, n: int) -> Snaps:
        """Snapshots inside the chunk of ``n`` tokens from ``num_computed``."""
        plan, end = self._plans.get(seq.seq_id), seq.num_computed + n
        out = []
        while plan and plan[0] <= end:
            out += self._slot_for(plan.pop(0))
        return out

    def decode_snaps(self, seq: Sequence) -> Snaps:
        """A snapshot after this decode token when the policy wants one there."""
        pos = seq.num_computed + 1
        if self.ckpts is None or not self.policy.decode_point(seq.all_ids, pos):
            return []
        return self._slot_for(pos)

    def _slot_for(self, pos: int) -> Snaps:
        slot = self.ckpts.alloc()
        return [] if slot is None else [(pos, slot)]

    def register(self, seq: Sequence, snaps: Snaps, tree: RadixCache) -> None:
        """After the step: hang the filled slots on the tree (the pages up to each position are in it)."""
        S = self.kv.page_size
        for pos, slot in snaps:
            d, r = divmod(pos, S)
            node = tree.match_node(seq.all_ids, max_pages=d)
            assert node.depth == d, "snapshot before its pages were cached"
            page = self.kv.tables[seq.seq_id][d] if r else None
            self.ckpts.add(
                node, tuple(seq.all_ids[d * S : pos]), slot, page, self._stamps.get(seq.seq_id)
            )

    def final_snaps(self, seq: Sequence, preempted: bool) -> Snaps:
        """The live state as a checkpoint of a finished (ends of turns kept) or preempted sequence."""
        if (
            self.ckpts is None
            or seq.state_slot is None
            or seq.num_computed == 0
            or self.policy.kind == "none"
        ):
            return []
        if not (preempted or self.policy.at_finish) or self.ckpts.exists(
            seq.all_ids, seq.num_computed
        ):
            return []
        out = self._slot_for(seq.num_computed)
        for _, slot in out:
            self.live.copy_to(seq.state_slot, self.ckpts.pool, slot)
        return out

    def release(self, seq: Sequence) -> None:
        """Free the live slot and anything pending (the sequence finished, was aborted or preempted)."""
        tail = self._tails.pop(seq.seq_id, None)
        if tail is not None:
            self.kv.unref(tail[0])
        self._plans.pop(seq.seq_id, None)
        self._stamps.pop(seq.seq_id, None)
        if seq.state_slot is not None:
            self.live.free(seq.state_slot)
            seq.state_slot = None
