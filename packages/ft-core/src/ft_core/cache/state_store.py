"""Recurrent-state slots of linear-attention layers (Gated DeltaNet): one pool of live per-sequence
states and one pool of prefix checkpoints, both ``StatePool``s of fixed-size slots.

A slot holds the complete recurrent state of one sequence at one position: for every linear layer j
the conv state ``conv[j][slot]`` [C, Kc-1] (the last Kc-1 conv inputs, model dtype) and the recurrent
state ``rec[j][slot]`` [Hv, Dk, Dv] (float32). Slots are preallocated, so a forward reads and writes
them by index (batched decode gathers/scatters rows) and copies between pools are plain row copies.

Legend: N = slots, C = conv channels, Kc = conv kernel, Hv = value heads, Dk/Dv = key/value dims.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ft_core.model_config import ModelConfig


@dataclass(frozen=True)
class StateLayout:
    layers: int  # linear-attention layers
    conv_dim: int  # C
    conv_width: int  # Kc - 1
    heads: int  # Hv
    k_dim: int  # Dk
    v_dim: int  # Dv
    conv_dtype: torch.dtype

    @classmethod
    def of(cls, cfg: ModelConfig, dtype: torch.dtype) -> StateLayout | None:
        """The layout of ``cfg``'s linear layers, or None for a model without any."""
        lin = cfg.linear
        if lin is None or not cfg.linear_layers:
            return None
        return cls(len(cfg.linear_layers), lin.conv_dim, lin.conv_kernel - 1, lin.v_heads, lin.k_dim, lin.v_dim, dtype)

    @property
    def bytes_per_slot(self) -> int:
        conv = self.conv_dim * self.conv_width * torch.tensor([], dtype=self.conv_dtype).element_size()
        return self.layers * (conv + self.heads * self.k_dim * self.v_dim * 4)


@dataclass
class StateBatch:
    """What the linear layers of one forward need: each sequence's live slot and its snapshots.

    ``snaps[b]`` lists (n, slot): after the first n new tokens of sequence b in this forward, copy its
    state into checkpoint slot ``slot`` of ``ckpt`` (n = its whole chunk for the end of the chunk)."""

    live: StatePool
    slots: list[int]  # [B] live slot per sequence of the batch
    snaps: list[list[tuple[int, int]]] = field(default_factory=list)
    ckpt: StatePool | None = None


class StatePool:
    """``num_slots`` state slots; ``alloc`` hands out a zeroed slot (the state before any token)."""

    def __init__(self, layout: StateLayout, num_slots: int, device: torch.device | str = "cpu"):
        L = layout
        self.layout, self.num_slots = L, num_slots
        self.conv = [torch.zeros(num_slots, L.conv_dim, L.conv_width, dtype=L.conv_dtype, device=device)
                     for _ in range(L.layers)]
        self.rec = [torch.zeros(num_slots, L.heads, L.k_dim, L.v_dim, dtype=torch.float32, device=device)
                    for _ in range(L.layers)]
        self._free = list(range(num_slots - 1, -1, -1))

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
        for c, r in zip(self.conv, self.rec):
            c[slot].zero_()
            r[slot].zero_()
        return slot

    def free(self, slot: int) -> None:
        assert 0 <= slot < self.num_slots and slot not in self._free, f"state slot {slot} is not in use"
        self._free.append(slot)

    def copy_to(self, slot: int, dst: StatePool, dst_slot: int) -> None:
        """Copy every layer's state of ``slot`` into ``dst_slot`` of ``dst`` (same layout)."""
        for j in range(self.layout.layers):
            self.copy_layer_to(j, slot, dst, dst_slot)

    def copy_layer_to(self, j: int, slot: int, dst: StatePool, dst_slot: int) -> None:
        """Copy linear layer ``j``'s state of ``slot`` into ``dst_slot`` of ``dst``."""
        dst.conv[j][dst_slot].copy_(self.conv[j][slot])
        dst.rec[j][dst_slot].copy_(self.rec[j][slot])
