"""``Source``: what ``ft convert`` (ftw_write.py) reads a model through, whatever it was stored as (a
Hugging Face directory, a GGUF file): its ModelConfig, dense tensors by Hugging Face name, the expert
bank layer by layer, byte counts for progress, and the metadata files an FTW directory carries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ft_core.loader.tensor_index import TensorIndex
from ft_core.model_config import ModelConfig


@dataclass(frozen=True)
class Source:
    cfg: ModelConfig
    index: TensorIndex  # dense tensors (expert tensors, if listed, are skipped by name)
    reader: object  # a WeightReader: expert_bank(cfg, [prefix]) per MoE layer
    prefixes: list[str]  # the MLP module name of each MoE layer ("model.layers.3.mlp")
    layer_bytes: Callable[[str], int]  # source bytes of one MoE layer's experts (progress)
    total_bytes: int  # source bytes of everything (progress)
    write_metadata: Callable[[Path], None]  # config.json, tokenizer and generation files into a dir
    release: Callable[[], None]  # closes the files read

    def close(self) -> None:
        self.release()
