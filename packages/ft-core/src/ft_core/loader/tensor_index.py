"""``TensorIndex``: the one reader protocol under ``WeightReader``: named tensors of a checkpoint
directory with their dtypes and files. ``SafetensorsIndex`` (``loader/safetensors_index.py``, reads
on demand) and ``FTWTensors`` (``loader/ftw_read.py``, read up front) implement it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch


class TensorIndex(Protocol):
    dir: Path  # the checkpoint directory (named in errors)

    def __contains__(self, name: str) -> bool: ...

    def names(self) -> list[str]:
        """Every stored tensor name."""
        ...

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Tensor ``name`` as stored; CheckpointError when missing or not of ``shape``."""
        ...

    def dtype(self, name: str) -> torch.dtype:
        """The stored dtype of ``name``."""
        ...

    def file_of(self, name: str) -> Path:
        """The file that holds ``name`` (for errors)."""
        ...

    def read_into(self, jobs: list[tuple[str, torch.Tensor]]) -> None:
        """Each stored tensor ``name`` into ``dest`` (mutated; the stored shape) for each job."""
        ...

    def close(self) -> None:
        """Release files and buffers; the index is unusable after."""
        ...
