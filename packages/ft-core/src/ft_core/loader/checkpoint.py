"""Open a checkpoint: a Hugging Face or FTW directory (config.json -> ModelConfig, tensors -> Decoder,
tokenizer files) or a GGUF file (loader/gguf_read.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ft_core.config import EngineConfig
from ft_core.errors import CheckpointError
from ft_core.loader.ftw_format import is_ftw_dir
from ft_core.loader.ftw_read import open_ftw
from ft_core.loader.gguf_read import is_gguf, open_gguf
from ft_core.loader.model_ref import resolve_model
from ft_core.loader.safetensors_index import SafetensorsIndex
from ft_core.loader.weights import WeightReader
from ft_core.model_config import ModelConfig
from ft_core.models.config_parse import parse_config
from ft_core.models.decoder import Decoder
from ft_core.tokenizer import Tokenizer


@dataclass
class Checkpoint:
    model_config: ModelConfig
    model: Decoder
    tokenizer: Tokenizer
    generation_config: dict


def read_json(path: Path, required: bool) -> dict:
    if not path.is_file():
        if required:
            raise CheckpointError(
                f"{path}: missing (is {path.parent} a Hugging Face checkpoint directory?)"
            )
        return {}
    try:
        d = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from e
    if not isinstance(d, dict):
        raise CheckpointError(f"{path}: must be a JSON object, got a {type(d).__name__}")
    return d


def load_checkpoint(cfg: EngineConfig) -> Checkpoint:
    root = resolve_model(cfg.model)  # ollama:NAME / lmstudio:NAME, else a path
    if not root.exists():
        raise CheckpointError(f"{root}: no such checkpoint directory or GGUF file")
    if is_gguf(root):  # llama.cpp / Ollama / LM Studio model file (loader/gguf_read.py)
        model_config, reader, tokenizer, gen = open_gguf(root, cfg.torch_dtype)
        try:
            model = Decoder(reader, model_config, cfg)
        finally:
            reader.g.close()
        return Checkpoint(model_config, model, tokenizer, gen)
    if not root.is_dir():
        raise CheckpointError(
            f"{root}: not a directory or a .gguf file (give the checkpoint directory)"
        )
    model_config = parse_config(read_json(root / "config.json", True), root / "config.json")
    gen = read_json(root / "generation_config.json", False)
    if is_ftw_dir(
        root
    ):  # `ft convert` output: banks pre-merged, read in parallel (loader/ftw_read.py)
        reader = open_ftw(root, cfg.torch_dtype, model_config)
    else:
        reader = WeightReader(SafetensorsIndex(root), cfg.torch_dtype, model_config.quant)
    try:
        model = Decoder(reader, model_config, cfg)
    finally:
        reader.index.close()
    eos = gen.get("eos_token_id", [])
    tokenizer = Tokenizer.from_dir(root, eos if isinstance(eos, list) else [eos])
    return Checkpoint(model_config, model, tokenizer, gen)
