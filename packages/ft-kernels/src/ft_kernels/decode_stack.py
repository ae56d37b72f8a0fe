"""Python face of a run of decode-layer plans (csrc/bind_decode_stack.cpp): a decode step's consecutive planned
layers in one C++ call. Each layer's pools are bound once (``bind``; again after they are rebuilt), so a step
passes only what its layers share -- one call of ~8 tensors a step instead of one of ~12 a layer (48 layers: ~1 ms
of Python a step).

Twin: the same ``DecodeLayer`` objects called one after another, which it equals bit for bit
(tests/test_decode_layer.py).

Legend: T = tokens (one per sequence), H = hidden, n = layers in the stack.
"""

from __future__ import annotations

import torch

from ft_kernels import _C
from ft_kernels.cpu import _a
from ft_kernels.decode_layer import DecodeLayer


class DecodeStack:
    """``layers`` (``DecodeLayer``, sharing H) applied in order to x, each with its own pools."""

    def __init__(self, layers: list[DecodeLayer]):
        if not layers or not all(isinstance(p, DecodeLayer) for p in layers):
            raise ValueError("DecodeStack takes a non-empty list of DecodeLayer")
        self.layers = list(layers)
        self._stack = _C.DecodeStackPlan([p._plan for p in self.layers])
        self._bound: tuple = ()

    def bind(
        self,
        k_pools: list[torch.Tensor | None],
        v_pools: list[torch.Tensor | None],
        conv_states: list[torch.Tensor | None],
        states: list[torch.Tensor | None],
    ) -> None:
        """Layer i's pools, one entry per layer: k_pools[i], v_pools[i] [P, S, K, D] bfloat16 (GQA and gated
        attention; None for GDN), conv_states[i] [Ns, C, Kc-1] bfloat16 and states[i] [Ns, Hv, Dk, Dv] float32
        (GDN; None elsewhere). Kept (alive) until the next bind."""
        lists = (list(k_pools), list(v_pools), list(conv_states), list(states))
        self._stack.bind(*([_a(t) for t in ts] for ts in lists))
        self._bound = lists

    def bound_to(
        self,
        k_pools: list[torch.Tensor | None],
        v_pools: list[torch.Tensor | None],
        conv_states: list[torch.Tensor | None],
        states: list[torch.Tensor | None],
    ) -> bool:
        """Whether the pools bound are these very tensors (pools rebuilt by a resize are new tensors)."""
        given = (k_pools, v_pools, conv_states, states)
        return bool(self._bound) and all(
            len(b) == len(g) and all(x is y for x, y in zip(b, g))
            for b, g in zip(self._bound, given)
        )

    def __call__(
        self,
        x: torch.Tensor,
        page_table: torch.Tensor,
        ctx_lens: torch.Tensor,
        slots: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        eid_out: torch.Tensor | None = None,
        state_slots: torch.Tensor | None = None,
    ) -> None:
        """x [T, H] bfloat16, updated in place by every layer in turn; the other arguments as ``DecodeLayer``
        takes them, shared by the layers: eid_out [n, T, top_k] int32 (layer i's routed experts in eid_out[i]),
        state_slots [T] int64 (needed where a layer is GDN)."""
        self._stack.run(
            _a(x), _a(page_table), _a(ctx_lens), _a(slots), _a(cos), _a(sin), _a(eid_out),
            _a(state_slots),
        )  # fmt: skip
