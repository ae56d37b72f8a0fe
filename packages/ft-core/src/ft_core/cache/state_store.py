"""Per-sequence state of the layers that do not keep paged KV: one pool of live per-sequence states
and one pool of prefix checkpoints, both ``StatePool``s of fixed-size slots.

A slot holds the complete state of one sequence at one position, a few tensors per state layer j
(the model's layers in order, see ``ModelConfig.state_layers``):

- Gated DeltaNet (linear attention): the conv state [C, Kc-1] (the last Kc-1 conv inputs, model
  dtype) and the recurrent state [Hv, Dk, Dv] (float32);
- sliding-window attention (GPT-OSS, when the window is kept as state): the keys and values of the
  last W tokens, a ring [W, K, D] each (model dtype), the token at position t in row t % W.

Slots are preallocated, so a forward reads and writes them by index (batched decode gathers/scatters
rows) and copies between pools are plain row copies.

Legend: N = slots, C = conv channels, Kc = conv kernel, Hv = value heads, Dk/Dv = key/value dims,
W = window, K = KV heads, D = head dim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ft_core.model_config import ModelConfig

Spec = tuple[tuple[int, ...], torch.dtype]  # one tensor of a slot: shape, dtype


@dataclass(frozen=True)
class StateLayout:
    layers: tuple[tuple[Spec, ...], ...]  # per state layer: the tensors one slot holds

    @classmethod
    def of(
        cls, cfg: ModelConfig, dtype: torch.dtype, window_state: bool | None = None
    ) -> StateLayout | None:
        """The state layout of ``cfg`` (``window_state``: see ``ModelConfig.state_layers``), or None for a
        model whose every layer keeps paged KV."""
        layers = []
        for i in cfg.state_layers(window_state):
            if i in cfg.linear_layers:
                lin = cfg.linear
                layers.append(
                    (
                        ((lin.conv_dim, lin.conv_kernel - 1), dtype),
                        ((lin.v_heads, lin.k_dim, lin.v_dim), torch.float32),
                    )
                )
            else:
                ring = ((cfg.sliding_windows[i], cfg.num_kv_heads, cfg.head_dim), dtype)
                layers.append((ring, ring))
        return cls(tuple(layers)) if layers else None

    @property
    def bytes_per_slot(self) -> int:
        size = lambda shape, dt: (
            torch.Size(shape).numel() * torch.tensor([], dtype=dt).element_size()
        )  # noqa: E731
        return sum(size(*spec) for layer in self.layers for spec in layer)


@dataclass
class StateBatch:
    """What the state layers of one forward need: each sequence's live slot and its snapshots.

    ``snaps[b]`` lists (n, slot): after the first n new tokens of sequence b in this forward, copy its
    state into checkpoint slot ``slot`` of ``ckpt`` (n = its whole chunk for the end of the chunk)."""

    live: StatePool
    slots: list[int]  # [B] live slot per sequence of the batch
    snaps: list[list[tuple[int, int]]] = field(default_factory=list)
    ckpt: StatePool | None = None

    def snapshot_decoded(self, j: int, seqs=None) -> None:
        """State layer ``j`` of each sequence in ``seqs`` (default all) with one new token, now advanced:
        copied into the checkpoint slots its ``snaps`` ask for."""
        for i in range(len(self.snaps)) if seqs is None else seqs:
            for _, cslot in self.snaps[i] if i < len(self.snaps) else ():
                self.live.copy_layer_to(j, self.slots[i], self.ckpt, cslot)


class StatePool:
    """``num_slots`` state slots; ``alloc`` hands out a zeroed slot (the state before any token).
    ``layer(j)`` is state layer j's tensors, each [N, *shape]. The pool is reserved, not filled: a slot is
    zeroed when handed out, so the memory of slots never used is never touched (not resident) -- a
    Qwen3.5-35B-A3B slot is ~63 MB (30 Gated DeltaNet states of 2 MB), 48 of them 3 GB."""

    def __init__(self, layout: StateLayout, num_slots: int, device: torch.device | str = "cpu"):
        self.layout, self.num_slots, self.device = layout, num_slots, torch.device(device)
        self.tensors = [
            tuple(torch.empty(num_slots, *shape, dtype=dt, device=device) for shape, dt in layer)
            for layer in layout.layers
        ]
        self._free = list(range(num_slots - 1, -1, -1))

    def layer(self, j: int) -> tuple[torch.Tensor, ...]:
        return self.tensors[j]

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def nbytes(self) -> int:
        return self.layout.bytes_per_slot * self.num_slots

    def alloc(self) -> int | None:
        """A zeroed slot, or None when every slot is in use."""
        if not self._free:
            return None
        slot = self._free.pop()
        for layer in self.tensors:
            for t in layer:
                t[slot].zero_()
        return slot

    def free(self, slot: int) -> None:
        assert 0 <= slot < self.num_slots and slot not in self._free, (
            f"state slot {slot} is not in use"
        )
        self._free.append(slot)

    def copy_to(self, slot: int, dst: StatePool, dst_slot: int) -> None:
        """Copy every layer's state of ``slot`` into ``dst_slot`` of ``dst`` (same layout)."""
        for j in range(len(self.tensors)):
            self.copy_layer_to(j, slot, dst, dst_slot)

    def copy_layer_to(self, j: int, slot: int, dst: StatePool, dst_slot: int) -> None:
        """Copy state layer ``j``'s state of ``slot`` into ``dst_slot`` of ``dst``."""
        for src, out in zip(self.tensors[j], dst.tensors[j]):
            out[dst_slot].copy_(src[slot])
