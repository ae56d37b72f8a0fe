"""Scheduler: continuous batching with chunked prefill and prefix reuse.

Every step runs one decode token of each running sequence and, with the rest of ``max_batch_tokens``,
prompt chunks of waiting sequences, all in one forward: a long prompt never stalls running streams.
A sequence that starts from scratch first adopts the longest cached prefix of its ids (whole pages of
the RadixCache, never its last token); the full pages it computes go into the cache after each prompt
chunk, when it is preempted and when it finishes. On a full KV pool, unused cached pages are evicted
(LRU) first; then a partly prefilled waiting sequence, else the newest running one, is preempted (its
pages dropped, recomputed later, mostly from the prefix cache).

Hybrid models (``state``: ``HybridState``) also need a live recurrent-state slot per admitted sequence
and may resume only at a state checkpoint: the KV pages are adopted up to exactly that position, never
at a page the recurrent layers cannot start from. Each step also carries the positions whose state is
snapshot into checkpoints (prompt anchors, decode anchors); they are hung on the tree afterwards.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.cache.radix import RadixCache, RadixNode
from ft_core.errors import RequestError
from ft_core.scheduler_state import HybridState, Snaps
from ft_core.sequence import Sequence


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]
    chunk: list[int]  # tokens each sequence runs this step
    prefill: list[bool]  # per sequence: a prompt chunk (True) or one decode token (False)
    snaps: list[Snaps] = field(
        default_factory=list
    )  # per sequence: (position, checkpoint slot) to snapshot

    @property
    def is_prefill(self) -> bool:
        """The step holds at least one prompt chunk."""
        return any(self.prefill)


class Scheduler:
    def __init__(
        self,
        kv: PagedKVCache,
        max_batch_tokens: int,
        prefix: RadixCache | None = None,
        state: HybridState | None = None,
    ):
        self.kv, self.budget, self.prefix, self.state = kv, max_batch_tokens, prefix, state
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._locks: dict[
            int, RadixNode
        ] = {}  # seq_id -> deepest prefix-cache node the sequence uses
        self.queried_tokens = 0  # ids looked up in the prefix cache at admission
        self.hit_tokens = 0  # of which adopted from it
        self.prefill_tokens = (
            0  # tokens run as prompt chunks (everything not served by the cache is re-prefilled)
        )

    def add(self, seq: Sequence) -> None:
        if self.kv.pages_for(seq.total_len + 1) > self.kv.num_pages:
            raise RequestError(
                f"prompt of {seq.total_len} tokens does not fit the KV cache ({self.kv.num_pages * self.kv.page_size} tokens)"
            )
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch | None:
        """All running decodes, then prompt chunks of waiting sequences in the budget that is left."""
        seqs = self._schedule_decodes()
        decodes = len(seqs)
        chunk, left = [1] * decodes, self.budget - decodes
        for seq in list(self.waiting):
            if left <= 0:
                break
            fresh = seq.num_computed == 0 and not self.kv.tables.get(seq.seq_id)
            if fresh and self.state is not None and not self.state.admit(seq):
                continue  # every live recurrent-state slot is taken (partial prefills behind may go on)
            restored = self._adopt_prefix(seq) if fresh else False
            n = min(seq.uncomputed, left)
            # With sequences decoding, admit only what fits; when nothing decodes, free partial prefills.
            while not self._reserve(seq, seq.num_computed + n):
                if self.running or not self._preempt_one(keep=seqs + [seq], waiting_only=True):
                    break
            else:
                if fresh:
                    self._count_hit(seq)
                    if self.state is not None:
                        self.state.admitted(seq, restored)
                seqs.append(seq)
                chunk.append(n)
                self.prefill_tokens += n
                left -= n
                continue
            if fresh:  # not admitted after all: let go of the adopted pages until it is
                self._release(seq, cache=False)
                seq.num_computed = 0
            break
        if not seqs:
            if self.waiting:
                raise RequestError("KV cache cannot hold the waiting request")
            return None
        # Snapshot slots only now: allocating one may evict a checkpoint, after every restore of this step.
        snaps = (
            []
            if self.state is None
            else [
                self.state.decode_snaps(s) if i < decodes else self.state.prompt_snaps(s, n)
                for i, (s, n) in enumerate(zip(seqs, chunk))
            ]
        )
        return ScheduledBatch(seqs, chunk, [i >= decodes for i in range(len(seqs))], snaps)

    def _schedule_decodes(self) -> list[Sequence]:
        """Every running sequence with room for its next token (the newest are preempted until they fit)."""
        while self.running:
            if all(self._reserve(s, s.total_len) for s in self.running):
                return list(self.running)
            self._preempt_one(keep=[], waiting_only=False)
        return []

    def after_step(self, batch: ScheduledBatch) -> None:
        """Cache the new full pages of prompt chunks; move sequences whose prompt is done to running;
        drop finished ones (their computed pages stay in the prefix cache)."""
        for seq, prefill, snaps in zip(
            batch.seqs, batch.prefill, batch.snaps or [[]] * len(batch.seqs)
        ):
            if seq.finished:
                self._remove(seq)
                self._release(seq, cache=True, snaps=snaps)
                continue
            if prefill or snaps:
                self._cache(seq, keep=True)
            if snaps:
                self.state.register(seq, snaps, self.prefix)
            if prefill and seq.uncomputed == 1:
                self.waiting.remove(seq)
                self.running.append(seq)

    def abort(self, seq: Sequence) -> None:
        """Drop ``seq`` now, waiting or running; its pages lose its references (nothing is cached)."""
        self._remove(seq)
        self._release(seq, cache=False)

    # ---- internals ------------------------------------------------------------------------------
    def _remove(self, seq: Sequence) -> None:
        if any(s is seq for s in self.running):
            self.running.remove(seq)
        elif any(s is seq for s in self.waiting):
            self.waiting.remove(seq)

    def _reserve(self, seq: Sequence, tokens: int) -> bool:
        try:
            self.kv.reserve(seq.seq_id, tokens)
            return True
        except RequestError:
            return False

    def _adopt_prefix(self, seq: Sequence) -> bool:
        """Adopt the longest cached prefix of a sequence that starts from scratch: whole pages only, and
        never the page of its last token (at least one token is computed, no shared page is written).
        Hybrid models resume only at a state checkpoint (``HybridState.restore``). Returns whether any."""
        if self.prefix is None:
            return False
        if self.state is not None:
            node = self.state.restore(seq)
            if node is not None:
                self.prefix.lock(node)
                self._locks[seq.seq_id] = node
            return node is not None
        ids, S = seq.all_ids, self.kv.page_size
        node = self.prefix.match_node(ids, max_pages=(len(ids) - 1) // S)
        pages = RadixCache.pages(node)
        if pages:
            self.kv.adopt(seq.seq_id, pages)
            self.prefix.lock(node)
            self._locks[seq.seq_id] = node
            seq.num_computed = len(pages) * S
        return bool(pages)

    def _count_hit(self, seq: Sequence) -> None:
        """A sequence starting from scratch was admitted with ``num_computed`` tokens from the cache."""
        if self.prefix is None:
            return
        self.queried_tokens += seq.total_len
        self.hit_tokens += seq.num_computed
        if seq.preemptions == 0:
            seq.cached_tokens = seq.num_computed

    def _cache(self, seq: Sequence, keep: bool) -> RadixNode | None:
        """Insert the sequence's full computed pages into the prefix cache. ``keep``: the sequence goes
        on, so it switches to the cache's copy of duplicate pages and locks its new deepest node.
        Returns the deepest node of its pages (None when nothing was inserted)."""
        k = seq.num_computed // self.kv.page_size
        if self.prefix is None or k == 0 or seq.seq_id not in self.kv.tables:
            return None
        node = self.prefix.insert(
            seq.all_ids[: k * self.kv.page_size], self.kv.tables[seq.seq_id][:k]
        )
        if keep:
            self.kv.share(seq.seq_id, RadixCache.pages(node))
            self.prefix.lock(node)
            old = self._locks.get(seq.seq_id)
            if old is not None:
                self.prefix.unlock(old)
            self._locks[seq.seq_id] = node
        return node

    def _release(
        self, seq: Sequence, cache: bool, snaps: Snaps = (), preempted: bool = False
    ) -> None:
        """Drop the sequence's pages and prefix-cache lock (after caching its computed pages if ``cache``).
        Hybrids: this step's snapshots and the final state (``HybridState.final_snaps``) become checkpoints
        first; afterwards the live slot is freed and KV pages no checkpoint needs are dropped."""
        deepest = self._cache(seq, keep=False) if cache else None
        if self.state is not None and cache and self.prefix is not None:
            self.state.register(seq, snaps, self.prefix)
            self.state.register(seq, self.state.final_snaps(seq, preempted), self.prefix)
        node = self._locks.pop(seq.seq_id, None)
        if node is not None:
            self.prefix.unlock(node)
        self.kv.free(seq.seq_id)
        if self.state is not None:
            self.state.release(seq)
            if self.state.ckpts is not None:
                for n in (deepest, node):
                    if n is not None and n.parent is not None:
                        self.state.ckpts.prune(n)

    def _preempt_one(self, keep: list[Sequence], waiting_only: bool) -> bool:
        """Free the pages of one sequence: a partly prefilled waiting one first, then the newest running one."""
        for seq in reversed(self.waiting):
            if all(seq is not k for k in keep) and self.kv.tables.get(seq.seq_id):
                self._preempt(seq)
                return True
        if waiting_only or not self.running:
            return False
        seq = self.running.pop()
        self._preempt(seq)
        self.waiting.appendleft(seq)
        return True

    def _preempt(self, seq: Sequence) -> None:
        self._release(seq, cache=True, preempted=True)
        seq.num_computed = 0
        seq.preemptions += 1
