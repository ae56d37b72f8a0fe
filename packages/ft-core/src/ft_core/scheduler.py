"""Minimal scheduler: chunked prefill first, then one batched decode step over every running
sequence; on a full KV pool the newest sequence is preempted (its cache freed, recomputed later).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ft_core.cache.kv_cache import PagedKVCache
from ft_core.errors import RequestError
from ft_core.sequence import Sequence


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]
    chunk: list[int]  # tokens each sequence runs this step
    is_prefill: bool


class Scheduler:
    def __init__(self, kv: PagedKVCache, max_batch_tokens: int):
        self.kv, self.budget = kv, max_batch_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        if self.kv.pages_for(seq.total_len + 1) > self.kv.num_pages:
            raise RequestError(
                f"prompt of {seq.total_len} tokens does not fit the KV cache ({self.kv.num_pages * self.kv.page_size} tokens)"
            )
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch | None:
        if self.waiting:
            seqs, chunk, left = [], [], self.budget
            for seq in list(self.waiting):
                n = min(seq.uncomputed, left)
                if n <= 0:
                    break
                # With sequences decoding, admit only what fits; when nothing decodes, free partial prefills.
                while not self._reserve(seq, seq.num_computed + n):
                    if self.running or not self._preempt_one(keep=seqs + [seq], waiting_only=True):
                        break
                else:
                    seqs.append(seq)
                    chunk.append(n)
                    left -= n
                    continue
                break
            if seqs:
                return ScheduledBatch(seqs, chunk, True)
            if not self.running:
                raise RequestError("KV cache cannot hold the waiting request")
        while self.running:
            if all(self._reserve(s, s.total_len) for s in self.running):
                return ScheduledBatch(list(self.running), [1] * len(self.running), False)
            self._preempt_one(keep=[], waiting_only=False)
        return None

    def _reserve(self, seq: Sequence, tokens: int) -> bool:
        try:
            self.kv.reserve(seq.seq_id, tokens)
            return True
        except RequestError:
            return False

    def _preempt_one(self, keep: list[Sequence], waiting_only: bool) -> bool:
        """Free the pages of one sequence: a partly prefilled waiting one first, then the newest running one."""
        for seq in reversed(self.waiting):
            if seq not in keep and self.kv.tables.get(seq.seq_id):
                self.kv.free(seq.seq_id)
                seq.num_computed = 0
                return True
        if waiting_only or not self.running:
            return False
        seq = self.running.pop()
        self.kv.free(seq.seq_id)
        seq.num_computed = 0
        self.waiting.appendleft(seq)
        return True

    def after_step(self, batch: ScheduledBatch) -> None:
        """Move sequences whose prompt is done to running; drop finished ones and free their pages."""
        for seq in batch.seqs:
            if seq.finished:
                self.kv.free(seq.seq_id)
                if seq in self.running:
                    self.running.remove(seq)
                elif seq in self.waiting:
                    self.waiting.remove(seq)
            elif batch.is_prefill and seq.uncomputed == 1 and seq in self.waiting:
                self.waiting.remove(seq)
                self.running.append(seq)
