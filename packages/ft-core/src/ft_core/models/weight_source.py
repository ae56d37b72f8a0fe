"""``WeightSource``: what the model definition reads its weights through. The loader's readers
(``loader/weights.py`` over safetensors, ``loader/ftw_read.py`` over FTW) implement it, so models/
and layers/ name tensors without importing the loader (arrows point loader -> models only).
"""

from __future__ import annotations

from typing import Protocol

import torch

from ft_core.experts.bank import ExpertBank
from ft_core.model_config import ModelConfig


class WeightSource(Protocol):
    dense_bytes: (
        int  # bytes of the tensors handed out by tensor()/linear() so far (experts excluded)
    )

    def has(self, name: str) -> bool:
        """Whether the checkpoint stores tensor ``name``."""

    def tensor(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: torch.dtype | None = None,
        finite: bool = False,
    ) -> torch.Tensor:
        """Floating-point ``name`` of ``shape`` in ``dtype`` (default: the engine's); ``finite``:
        refuse NaN/inf."""

    def linear(
        self, prefix: str, out_f: int, in_f: int, bias: bool = False, finite: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``prefix``.weight [out_f, in_f] (fp8 dequantised) and bias [out_f] or None."""

    def native(self, prefixes: list[str]):
        """The stored quantised bits of ``prefix``.weight for each prefix, rows concatenated, as one
        ``ft_kernels.ExpertWeights`` matrix when a kernel reads that format exactly; else None."""

    def expert_bank(self, cfg: ModelConfig, prefixes: list[str]) -> ExpertBank:
        """Every MoE layer's experts (``prefixes[m]``: that layer's MLP module name) in one bank."""
