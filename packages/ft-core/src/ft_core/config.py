"""EngineConfig: the one frozen configuration passed down from Engine.from_pretrained."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ft_core.errors import FTError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class EngineConfig:
    model: str  # checkpoint directory
    device: str = "cpu"
    dtype: str = "float32"  # activations and dense weights: float32 | bfloat16 | float16
    expert_impl: str = "auto"  # auto | kernel (ft_kernels C++) | torch (reference)
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    page_size: int = 16
    kv_cache_bytes: int = 1 << 30  # KV pool budget (host memory on CPU)
    max_batch_tokens: int = 2048  # prefill chunk budget per step

    def __post_init__(self):
        if self.dtype not in _DTYPES:
            raise FTError(f"dtype {self.dtype!r} is not one of {', '.join(_DTYPES)}")
        if self.device != "cpu":
            raise FTError(
                f"device {self.device!r}: this build runs on 'cpu' only; GPU execution arrives with the expert cache"
            )
        if self.page_size < 1 or self.max_batch_tokens < 1:
            raise FTError("page_size and max_batch_tokens must be >= 1")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]
