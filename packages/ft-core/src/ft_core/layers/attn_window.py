"""Sliding-window attention whose window is per-sequence state (GPT-OSS with ``window_state``).

A windowed layer needs only the keys and values of the last W tokens, so instead of paged KV of every
token it keeps a ring [W, K, D] of each in the sequence's state slot (``cache/state_store.py``; the
token at position t in row t % W). The ring is state like a recurrent layer's: it is snapshot into
checkpoint slots at the requested positions and restored with them, so the KV pages of the
full-attention layers plus one checkpoint resume a prefix exactly.

For a chunk of L new tokens from position p the keys are the ring unrolled (positions p-W .. p-1)
followed by the chunk: [W + L]. Query i (position p+i) sees keys i+1 .. i+W of that array that are
at positions >= 0 (the mask of ``ForwardBatch.mask(W)``), so query blocks read a band of keys only.
Afterwards the ring holds keys L .. L+W-1 (the last W tokens); a snapshot after the first n tokens
is keys n .. n+W-1.

A decode step taking no checkpoint (``window_decode``) writes each new key into its ring row first and
reads the ring in place with the decode kernel (``attention.decode_in_place``): the ring is a pool of one
W-row page a sequence (its state slot), whose rows 0 .. min(ctx, W) - 1 are the visible keys in some order
(softmax does not care, rounding aside). Nothing there reads a host value of the batch, so a captured
decode step (``decode_graph.py``) replays it as contexts grow.

Legend: T = packed tokens, B = sequences, Lq = padded chunk length, W = window, K = KV heads,
N = query heads, D = head dim.
"""

from __future__ import annotations

import torch

from ft_core.layers.attention import Q_BLOCK, attend, decode_in_place, in_place, pad_queries, unpad
from ft_core.layers.batch import ForwardBatch


class _Plan:
    """What every windowed layer of one forward shares (built once per batch and window): the ring rows
    of the unrolled window, key positions, the band mask of each query block, the rows the last W
    tokens go to. Legend as the module's."""

    def __init__(self, batch: ForwardBatch, W: int):
        Lq, d = batch.Lq, batch.device
        self.slots = torch.tensor(batch.state.slots, device=d)
        self.qlen = torch.tensor(batch.q_lens, device=d)
        self.start = (
            torch.tensor(batch.ctx_lens, device=d) - self.qlen
        )  # [B] position of each chunk's first token
        self.back = torch.arange(W, device=d) - W  # offsets -W .. -1
        self.rows = (
            self.start[:, None] + self.back
        ) % W  # ring rows of positions start-W .. start-1
        kpos = torch.cat([self.start[:, None] + self.back, batch.q_pos], dim=1)  # [B, W + Lq]
        qvalid = torch.arange(Lq, device=d)[None] < self.qlen[:, None]  # [B, Lq]
        kvalid = torch.cat([kpos[:, :W] >= 0, qvalid], dim=1)
        self.blocks = []  # (s0, e, mask [B, e - s0, e - s0 + W]): query block [s0, e) reads keys [s0, e + W)
        for s0 in range(0, Lq, Q_BLOCK):
            e = min(Lq, s0 + Q_BLOCK)
            kp, qp = kpos[:, s0 : e + W], batch.q_pos[:, s0:e]
            m = (
                (kp[:, None] <= qp[:, :, None])
                & (kp[:, None] > qp[:, :, None] - W)
                & kvalid[:, None, s0 : e + W]
            )
            m[:, :, 0] |= ~qvalid[
                :, s0:e
            ]  # padding query rows see one key (no all-masked rows); discarded
            self.blocks.append((s0, e, m))
        self.last = self.qlen[:, None] + torch.arange(
            W, device=d
        )  # [B, W]: key indices of the last W tokens
        self.last_rows = (self.start[:, None] + self.last - W) % W


def window_attention(
    q: torch.Tensor,  # [T, N, D] new queries
    k: torch.Tensor,  # [T, K, D] new keys (rotary applied)
    v: torch.Tensor,  # [T, K, D]
    batch: ForwardBatch,
    j: int,  # state layer index of this attention layer
    scale: float,
    sinks: torch.Tensor | None = None,  # [N]
) -> torch.Tensor:  # [T, N, D] in q's dtype
    st = batch.state
    ring_k, ring_v = st.live.layer(j)  # [slots, W, K, D]
    if batch.Lq == 1 and not any(st.snaps or []) and in_place(q, ring_k, ring_v):
        return window_decode(q, k, v, batch, ring_k, ring_v, scale, sinks)
    W, K = ring_k.shape[1], ring_k.shape[2]
    B, Lq = batch.batch_size, batch.Lq
    plan = batch.memo.get(("ring", W))
    if plan is None:
        plan = batch.memo[("ring", W)] = _Plan(batch, W)
    slots = plan.slots

    def keys_of(
        ring: torch.Tensor, new: torch.Tensor
    ) -> torch.Tensor:  # -> [B, W + Lq, K, D] in ring dtype
        pad = ring.new_zeros(B * Lq, *new.shape[1:])
        pad[batch.dest] = new.to(ring.dtype)
        return torch.cat([ring[slots[:, None], plan.rows], pad.view(B, Lq, *new.shape[1:])], dim=1)

    keys, vals = keys_of(ring_k, k), keys_of(ring_v, v)
    qb = pad_queries(q, batch, K)
    out = []
    for s0, e, m in plan.blocks:
        ks = keys[:, s0 : e + W].transpose(1, 2).float()
        vs = vals[:, s0 : e + W].transpose(1, 2).float()
        out.append(attend(qb[:, :, :, s0:e], ks, vs, m, scale, sinks))
    o = torch.cat(out, dim=3) if len(out) > 1 else out[0]

    ar = torch.arange(W, device=q.device)
    for b, snaps in enumerate(
        st.snaps or []
    ):  # the window after the first n new tokens: keys n .. n+W-1
        for n, cslot in snaps:
            ck_k, ck_v = st.ckpt.layer(j)
            r = (plan.start[b] + n + plan.back) % W
            ck_k[cslot, r], ck_v[cslot, r] = keys[b, n + ar], vals[b, n + ar]
    b_idx = torch.arange(B, device=q.device)[:, None]
    ring_k[slots[:, None], plan.last_rows] = keys[b_idx, plan.last]
    ring_v[slots[:, None], plan.last_rows] = vals[b_idx, plan.last]
    return unpad(o, batch, q.dtype)


def window_decode(
    q: torch.Tensor,  # [B, N, D] one new query a sequence
    k: torch.Tensor,  # [B, K, D] its key (rotary applied)
    v: torch.Tensor,  # [B, K, D]
    batch: ForwardBatch,
    ring_k: torch.Tensor,  # [slots, W, K, D] the layer's rings (``attention.in_place`` takes them with q)
    ring_v: torch.Tensor,
    scale: float,
    sinks: torch.Tensor | None = None,  # [N]
) -> torch.Tensor:  # [B, N, D] in q's dtype
    """A decode step of a windowed layer whose sequences take no checkpoint: each new key and value into row
    position % W of its sequence's ring (over the key W tokens back, now outside the window), then the
    decode kernel over the rings as a pool of one page a sequence: page = its state slot, keys = rows
    0 .. min(ctx, W) - 1. Slots, positions and lengths are read on the device."""
    W = ring_k.shape[1]
    slots = batch.state_slots_tensor()
    rows = batch.positions % W
    ring_k[slots, rows] = k.to(ring_k.dtype)
    ring_v[slots, rows] = v.to(ring_v.dtype)
    seen = batch.ctx_tensor().clamp(max=W)
    return decode_in_place(q, ring_k, ring_v, slots[:, None], seen, scale, None, sinks)
