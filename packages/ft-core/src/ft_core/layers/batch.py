"""ForwardBatch: where every token of one forward belongs, built once and shared by all layers.

Tokens of several sequences are packed flat (T = total new tokens). Each sequence b has q_len[b]
new tokens at the end of ctx_len[b] total tokens. Attention pads to [B, Lq] queries and
[B, Lk] keys, Lk = pages per sequence * page size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


def padded_page_table(tables: list[list[int]]) -> torch.Tensor:
    """Each sequence's page list as one row of [B, Pmax] int64, padded with page 0 (masked by context length)."""
    width = max(len(t) for t in tables)
    return torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int64)


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    slots: torch.Tensor  # [T] flat KV slot of each new token
    page_table: torch.Tensor  # [B, Pmax] int64 (padding rows point at page 0; masked)
    q_lens: list[int]
    ctx_lens: list[int]
    page_size: int
    state: Any = None  # StateBatch (cache/state_store.py) for models with linear-attention layers
    memo: dict = field(
        init=False, default_factory=dict
    )  # values every layer of this forward shares (masks, ...)

    def __post_init__(self):
        self.Lq = max(self.q_lens)

    @classmethod
    def one_token(
        cls,
        ids: list[int],
        positions: list[int],
        slots: list[int],
        tables: list[list[int]],
        page_size: int,
        state: Any = None,
    ) -> ForwardBatch:
        """A batch of one new token a sequence (a decode step), from plain ints: ids, positions, slots [B],
        tables (each sequence's page list). Built in two tensor ops (a decode step's glue runs after
        weight streams have emptied the caches, where each torch op costs tens of microseconds)."""
        ctx = [p + 1 for p in positions]
        cols = torch.tensor([ids, positions, slots, ctx], dtype=torch.int64)
        fb = cls(
            cols[0],
            cols[1],
            cols[2],
            padded_page_table(tables),
            [1] * len(ids),
            ctx,
            page_size,
            state,
        )
        fb.memo["ctx"] = cols[3]  # ctx_tensor()
        return fb

    @property
    def dest(self) -> torch.Tensor:
        """[T] index of each packed token into the padded [B * Lq] query rows (built once per forward)."""
        d = self.memo.get("dest")
        if d is None:
            Lq = self.Lq
            d = self.memo["dest"] = torch.cat(
                [torch.arange(ql, device=self.device) + b * Lq for b, ql in enumerate(self.q_lens)]
            )
        return d

    @property
    def q_pos(self) -> torch.Tensor:
        """[B, Lq] position of each padded query row (built once per forward)."""
        q = self.memo.get("q_pos")
        if q is None:
            q = torch.zeros(len(self.q_lens), self.Lq, dtype=torch.int64)
            for b, (ql, cl) in enumerate(zip(self.q_lens, self.ctx_lens)):
                q[b, :ql] = torch.arange(cl - ql, cl)
            q = self.memo["q_pos"] = q.to(self.device)
        return q

    def to(self, device: torch.device) -> ForwardBatch:
        """Move the index tensors to ``device`` (where the dense weights are), in place; what the
        layers build from the batch later is made there too. Returns self."""
        if device != self.input_ids.device:
            for name in ("input_ids", "positions", "slots", "page_table"):
                setattr(self, name, getattr(self, name).to(device))
            self.memo.clear()
        return self

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    @property
    def batch_size(self) -> int:
        return len(self.q_lens)

    def mask(self, window: int | None) -> torch.Tensor:
        """[B, Lq, Lk] bool: key visible to query (causal, inside the context, inside the window)."""
        m = self.memo.get(("mask", window))
        if m is None:
            Lk = self.page_table.shape[1] * self.page_size
            kpos = torch.arange(Lk, device=self.device)[None, None, :]
            q = self.q_pos[:, :, None]
            ctx = torch.tensor(self.ctx_lens, device=self.device)[:, None, None]
            m = (kpos <= q) & (kpos < ctx)
            if window is not None:
                m &= kpos > q - window
            self.memo[("mask", window)] = m
        return m

    def _int64(self, key: str, values) -> torch.Tensor:
        """``values`` as an int64 tensor on the batch's device, built once per forward (memo ``key``)."""
        t = self.memo.get(key)
        if t is None:
            t = self.memo[key] = torch.tensor(values, dtype=torch.int64, device=self.device)
        return t

    def ctx_tensor(self) -> torch.Tensor:
        """[B] int64 context lengths (the new tokens included), built once per forward."""
        return self._int64("ctx", self.ctx_lens)

    def q_lens_tensor(self) -> torch.Tensor:
        """[B] int64 new tokens of each sequence, built once per forward."""
        return self._int64("q_lens", self.q_lens)

    def state_slots_tensor(self) -> torch.Tensor:
        """[B] int64 live state slot of each sequence (models with state layers), built once per forward."""
        return self._int64("state_slots", self.state.slots)

    def last_token_index(self) -> torch.Tensor:
        """[B] flat index of each sequence's last new token (the one whose logits are sampled)."""
        return torch.tensor(self.q_lens, device=self.device).cumsum(0) - 1
