"""``open_gguf``: a GGUF model file (or the first part of a split one) as ft's loader sees a checkpoint:
ModelConfig (gguf_config.py), dense tensors under their Hugging Face names (``GGUFIndex``, a
TensorIndex), the expert bank (gguf_experts.py) and the tokenizer (tokenizer/gguf_vocab.py).

Dense tensors in F32 / F16 / BF16 are handed out as stored; quantised ones are dequantised by
llama.cpp's ``gguf.quants.dequantize`` to float32 (the engine casts them to its dtype), and the
projections in a type a kernel reads (Q4_0, Q8_0, Q2_K..Q6_K) are then swapped for their stored
bits (``GGUFIndex.native_raw`` through ``WeightReader.native``; models/dense_quant.keep_native).
Q / K rows of ``llama`` files are permuted back to Hugging Face's rotary layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ft_core.errors import CheckpointError
from ft_core.experts.bank import ExpertBank
from ft_core.loader.gguf_config import generation_eos, hf_config
from ft_core.loader.convert_source import Source
from ft_core.loader.ftw_io import pin_in_place
from ft_core.loader.gguf_experts import DENSE_TYPES, KINDS, gguf_bank
from ft_core.loader.gguf_file import GGUFFile, GGUFTensor
from ft_core.loader.gguf_names import ARCHS, FIXES, name_map, unpermute_rows
from ft_core.loader.weights import WeightReader
from ft_core.models.dense_quant import SWAPPED
from ft_core.model_config import ModelConfig
from ft_core.models.config_parse import parse_config
from ft_core.tokenizer import Tokenizer
from ft_core.tokenizer.gguf_vocab import gguf_tokenizer


class GGUFIndex:
    """TensorIndex over a GGUF file's non-expert tensors, under Hugging Face names."""

    def __init__(self, g: GGUFFile, heads: int, kv_heads: int):
        self.g, self.dir = g, g.path
        self.map = name_map(g.arch, list(g.tensors))
        self._permute = ARCHS[g.arch][2]
        self._heads = {"q_proj": heads, "k_proj": kv_heads}
        fixes = FIXES.get(g.arch)
        self._fix, self._rows = (fixes[0](g), fixes[1](g)) if fixes else (None, None)
        self._order = fixes[2](g) if fixes and fixes[2] else None

    def __contains__(self, name: str) -> bool:
        return name in self.map

    def names(self) -> list[str]:
        return list(self.map)

    def _tensor(self, name: str) -> GGUFTensor:
        if name not in self.map:
            raise CheckpointError(f"{self.g.path}: no tensor for {name!r} (llama.cpp name unknown)")
        return self.g.tensor(self.map[name])

    def get(
        self, name: str, shape: tuple[int, ...] | None = None, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """Tensor ``name`` as stored for float types; quantised types dequantised into ``dtype``
        (default float32)."""
        t = self._tensor(name)
        out = t.to_torch(dtype)
        if self._fix is not None:
            try:
                out = self._fix(name, out)
            except RuntimeError as e:  # a shape the metadata does not explain
                raise CheckpointError(
                    f"{t.file}: tensor {t.name!r} ({name}) of shape {list(t.shape)} does not fit "
                    f"the metadata ({e})"
                ) from e
        if shape is not None and tuple(shape) != tuple(out.shape):
            if [s for s in shape if s != 1] != [s for s in out.shape if s != 1]:
                raise CheckpointError(
                    f"{t.file}: tensor {t.name!r} ({name}) has shape {list(t.shape)}, expected "
                    f"{list(shape)}"
                )
            out = out.reshape(shape)  # GGML drops dims of 1 ([1, H] as [H]: llama-quantize)
        proj = name.split(".")[-2]
        if self._permute and proj in self._heads:
            out = unpermute_rows(out, self._heads[proj])
        return out

    def kept_as_stored(self, name: str, shape: tuple[int, ...]) -> bool:
        """Whether ``name`` is a projection ``models/dense_quant.keep_native`` may swap for its stored
        bits: a [shape] matrix in a type the kernels read (``native_raw`` would give it)."""
        if name not in self.map or name.split(".")[-2] not in SWAPPED:
            return False
        stored = self._stored_rows(name)
        return stored is not None and tuple(stored[0].shape) == tuple(shape)

    def _stored_rows(self, name: str) -> tuple[GGUFTensor, slice | torch.Tensor] | None:
        """(the tensor, which of its rows make the Hugging Face matrix) of a 2-D tensor in a type the
        kernels read as stored (``gguf_experts.DENSE_TYPES``); else None."""
        t = self._tensor(name)
        rows = self._rows(name) if self._rows is not None else slice(None)
        if t.type_name not in DENSE_TYPES or len(t.shape) != 2 or rows is None:
            return None
        return t, rows

    def native_raw(self, name: str) -> tuple[str, np.ndarray, int] | None:
        """(GGML type, stored rows uint8 [R, row bytes] in Hugging Face's row order, columns) of a 2-D
        tensor in a type the kernels read as stored (``gguf_experts.DENSE_TYPES``); else None."""
        stored = self._stored_rows(name)
        if stored is None:
            return None
        t, rows = stored
        raw = np.asarray(t.data).reshape(t.shape[0], -1)
        if not isinstance(rows, slice):  # whole rows of blocks move (Qwen3.5's value heads)
            raw = raw[rows.numpy()]
        proj = name.split(".")[-2]
        if self._permute and proj in self._heads:  # whole rows of blocks move
            raw = unpermute_rows(torch.from_numpy(raw.copy()), self._heads[proj]).numpy()
        return t.type_name, raw, t.shape[1]

    def native_raw_ordered(self, name: str) -> tuple[str, np.ndarray, int, torch.Tensor] | None:
        """(GGML type, stored rows as stored, columns, ``inv``) of a 2-D tensor in a kernel type whose
        columns the converter moved: its matrix times ``y[..., inv]`` is the Hugging Face matrix times
        ``y`` (``gguf_qwen35.input_order``); else None. Only a layer that reorders its input may take it."""
        t = self._tensor(name)
        inv = self._order(name) if self._order is not None else None
        if inv is None or t.type_name not in DENSE_TYPES or len(t.shape) != 2:
            return None
        return t.type_name, np.asarray(t.data).reshape(t.shape[0], -1), t.shape[1], inv

    def release(self, name: str, outer: slice = slice(None)) -> None:
        """Drop the file's pages of ``name`` (of its stored rows ``outer``, default all) from the process once
        a copy of those bits exists."""
        self._tensor(name).release(outer)

    def dtype(self, name: str) -> torch.dtype:
        return self._tensor(name).torch_dtype

    def file_of(self, name: str) -> Path:
        return self._tensor(name).file

    def read_into(self, jobs: list[tuple[str, torch.Tensor]]) -> None:
        for name, dest in jobs:
            dest.copy_(self.get(name, tuple(dest.shape)))

    def close(self) -> None:
        """The memory maps stay open while the expert bank is still to be built; GGUFWeights closes."""


class GGUFWeights(WeightReader):
    """WeightReader over a GGUF file: dense tensors through GGUFIndex, experts from gguf_bank."""

    def __init__(self, g: GGUFFile, dtype: torch.dtype, cfg: ModelConfig):
        super().__init__(GGUFIndex(g, cfg.num_heads, cfg.num_kv_heads), dtype, None)
        self.g = g
        self.defer_native = False  # see raw

    def raw(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """A linear weight: quantised types dequantised straight into the engine dtype (no float32
        copy of an LM head beside its cast); ``tensor`` (norms, routers) keeps float32. While
        ``defer_native`` is set (the Decoder building a layer whose projections it then swaps for
        their stored bits), a projection ``kept_as_stored`` comes as a placeholder instead, one NaN
        seen through every index (no memory of its own): nothing is dequantised for a float copy
        that would be thrown away. The Decoder loads the layer again, for real, if a NaN is left in
        it once the swap is done (``placement.holds_nan``)."""
        if self.defer_native and shape is not None and self.index.kept_as_stored(name, shape):
            return torch.full((1,) * len(shape), float("nan"), dtype=self.dtype).expand(shape)
        return self.index.get(name, shape, self.dtype)

    def expert_bank(self, cfg: ModelConfig, prefixes: list[str]) -> ExpertBank:
        """The file's experts in their stored bits, page-locked where CUDA is present (as the other
        readers' banks: the expert cache's fills are then asynchronous and its slot-copy kernel can
        read the bank in place)."""
        layers = [int(p.split(".")[2]) for p in prefixes]  # "model.layers.N.mlp"
        m = cfg.moe
        bank = gguf_bank(self.g, layers, m.num_experts, cfg.hidden_size, m.intermediate, m.act)
        pin_in_place(list(bank.tensors.values()), bank)
        return bank


def is_gguf(path: Path) -> bool:
    """A .gguf file, or any file that starts with GGUF's magic (Ollama's blobs have no suffix)."""
    if not path.is_file():
        return False
    if path.suffix == ".gguf":
        return True
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def _read(path: Path):
    """(GGUFFile, its config.json dict, ModelConfig, gguf_tokenizer's (tokenizer, config, template,
    eos ids)) of the GGUF model at ``path``; CheckpointError when its vocabulary outgrows the embedding."""
    g = GGUFFile(path)
    config = hf_config(g)
    cfg = parse_config(config, g.path)
    vocab = gguf_tokenizer(g, str(g.path))
    g.release(*(f"tokenizer.ggml.{k}" for k in ("tokens", "token_type", "merges", "scores")))
    if (n := vocab[0].get_vocab_size(with_added_tokens=True)) > cfg.vocab_size:
        raise CheckpointError(f"{g.path}: {n} tokens but the embedding has {cfg.vocab_size} rows")
    return g, config, cfg, vocab


def open_gguf(path: Path, dtype: torch.dtype):
    """(ModelConfig, GGUFWeights, Tokenizer, generation config dict) of the GGUF model at ``path``."""
    g, _, cfg, (tok, config, template, eos) = _read(path)
    return (
        cfg,
        GGUFWeights(g, dtype, cfg),
        Tokenizer(tok, config, template, eos),
        generation_eos(eos),
    )


def gguf_source(path: Path) -> Source:
    """The GGUF model at ``path`` as ``ft convert`` reads it: dense tensors and experts as the engine
    would load them (float32 engine), and config.json / tokenizer files written from its metadata."""
    import json

    g, config, cfg, (tok, tok_config, template, eos) = _read(path)
    reader = GGUFWeights(g, torch.float32, cfg)
    prefixes = [f"model.layers.{i}.mlp" for i in range(cfg.num_layers) if cfg.moe_layers[i]]

    def layer_bytes(prefix: str) -> int:
        n = prefix.split(".")[2]
        return sum(g.tensor(f"blk.{n}.ffn_{k}_exps.weight").data.nbytes for k in KINDS)

    def write_metadata(dst: Path) -> None:
        files = {
            "config.json": config,
            "generation_config.json": generation_eos(eos),
            "tokenizer_config.json": {**tok_config, "chat_template": template},
        }
        for name, d in files.items():
            (dst / name).write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")
        (dst / "tokenizer.json").write_text(tok.to_str())

    total = sum(t.data.nbytes for t in g.tensors.values())
    return Source(cfg, reader.index, reader, prefixes, layer_bytes, total, write_metadata, g.close)
