"""Read named dense weights from a checkpoint into the engine dtype, dequantising stored formats.

Stored dtypes are checked against what each kind of weight may be: norms, embeddings, biases and
routers are floating point; linear weights floating point or fp8 (block-scaled, beside their
``weight_scale_inv``); expert banks are read and checked in ``loader/hf_experts.py`` (also uint8
MXFP4 blocks).
"""

from __future__ import annotations

import numpy as np
import torch

from ft_core.errors import CheckpointError
from ft_core.experts.bank import ExpertBank
from ft_core.loader.ftw_io import pin_in_place
from ft_core.loader.hf_experts import load_hf_bank
from ft_core.loader.quant import FLOAT, FP8, fp8_block_dequant
from ft_core.loader.tensor_index import TensorIndex
from ft_core.model_config import ModelConfig, QuantConfig
from ft_core.nonfinite import all_finite

__all__ = ["FLOAT", "FP8", "WeightReader", "dtype_name"]


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


class WeightReader:
    """Tensors by name with shape checks; FP8 linear weights (``*_scale_inv`` beside them) dequantised."""

    def __init__(self, index: TensorIndex, dtype: torch.dtype, quant: QuantConfig | None):
        self.index, self.dtype, self.quant = index, dtype, quant
        self.dense_bytes = (
            0  # bytes of the tensors handed out by tensor()/linear() (experts excluded)
        )

    def _count(self, t: torch.Tensor | None) -> torch.Tensor | None:
        if t is not None:
            self.dense_bytes += t.numel() * t.element_size()
        return t

    def native(self, prefixes: list[str]):
        """The stored bits of the weights ``prefix``.weight, rows concatenated in order, as one kernel matrix
        (``ft_kernels.ExpertWeights`` of one expert) when the index holds them all quantised in one format
        a kernel reads exactly (``native_raw``: GGUF files and FTW directories written from them);
        else None."""
        get = getattr(self.index, "native_raw", None)
        if get is None:
            return None
        raws = [get(f"{p}.weight") for p in prefixes]
        if any(x is None for x in raws) or len({(ty, cols) for ty, _, cols in raws}) != 1:
            return None
        from ft_core.loader.gguf_experts import dense_matrix

        release = getattr(self.index, "release", None)  # copied: the file's pages may go
        rows = raws[0][1] if len(raws) == 1 else np.concatenate([raw for _, raw, _ in raws])
        one = prefixes[0] + ".weight"
        by_rows = (lambda s: release(one, s)) if release is not None and len(raws) == 1 else None
        out = dense_matrix(rows, raws[0][0], raws[0][2], by_rows)
        for p in prefixes if release is not None else ():
            release(f"{p}.weight")
        return out

    def native_ordered(self, prefix: str):
        """(``ft_kernels.ExpertWeights`` of ``prefix``.weight's stored bits, ``inv``) when the index holds
        them with their columns moved (``native_raw_ordered``: the matrix times ``y[..., inv]`` is the
        weight times ``y``); else None."""
        get = getattr(self.index, "native_raw_ordered", None)
        got = get(f"{prefix}.weight") if get is not None else None
        if got is None:
            return None
        from ft_core.loader.gguf_experts import dense_matrix

        ty, raw, cols, inv = got
        ew = dense_matrix(raw, ty, cols)
        if ew is not None:
            self.index.release(f"{prefix}.weight")
        return None if ew is None else (ew, inv)

    def has(self, name: str) -> bool:
        return name in self.index

    def tensor(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: torch.dtype | None = None,
        finite: bool = False,
    ) -> torch.Tensor:
        """A floating-point tensor of ``shape`` in ``dtype`` (default: the engine's). ``finite``:
        also refuse NaN/inf values (one read pass; for the embedding and norms, whose corruption
        every token meets)."""
        self.check_dtype(name, FLOAT)
        t = self.index.get(name, shape)
        if finite:
            self.check_finite(name, t)
        return self._count(t.to(dtype or self.dtype))

    def check_dtype(self, name: str, allowed: tuple[torch.dtype, ...]) -> torch.dtype:
        """The stored dtype of ``name``; CheckpointError naming file, tensor and dtype unless
        ``allowed``."""
        dt = self.index.dtype(name)
        if dt not in allowed:
            raise CheckpointError(
                f"{self.index.file_of(name)}: tensor {name!r} is stored as {dtype_name(dt)}; "
                f"this weight must be one of {', '.join(dtype_name(a) for a in allowed)}"
            )
        return dt

    def check_finite(self, name: str, t: torch.Tensor) -> None:
        """CheckpointError naming file and tensor when ``t`` holds a NaN or an infinity."""
        if not all_finite(t):
            n = int((~torch.isfinite(t)).sum())
            raise CheckpointError(
                f"{self.index.file_of(name)}: tensor {name!r} holds {n} NaN/inf "
                f"values of {t.numel()} (corrupt weights)"
            )

    def raw(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        return self.index.get(name, shape)

    def stored_dtype(self, name: str) -> torch.dtype:
        return self.index.dtype(name)

    def expert_bank(self, cfg: ModelConfig, prefixes: list[str]) -> ExpertBank:
        """Every MoE layer's experts (``prefixes[m]``: that layer's MLP module name) in one bank of
        ``len(prefixes) * E`` flat ids, read from the checkpoint's expert tensors (FTW readers hand
        over their pre-built bank instead). Page-locked where CUDA is present, as FTW banks are, so
        the expert cache's fills are asynchronous row copies."""
        bank = load_hf_bank(self, cfg, prefixes)
        pin_in_place(list(bank.tensors.values()), bank)
        return bank

    def read_into(self, jobs: list[tuple[str, torch.Tensor]]) -> None:
        """Each stored tensor ``name`` into ``dest`` (mutated; the stored shape) for ``(name, dest)`` in
        ``jobs``, as stored (no dtype conversion beyond ``dest``'s): straight into place where it can."""
        self.index.read_into(jobs)

    def linear(self, prefix: str, out_f: int, in_f: int, bias: bool = False, finite: bool = False):
        """Weight [out, in] (and bias [out] or None) of ``prefix``.weight in the engine dtype.
        ``finite``: refuse NaN/inf in the weight (as ``tensor``; for the LM head)."""
        name = f"{prefix}.weight"
        self.check_dtype(name, FLOAT + FP8)
        w = self.raw(name, (out_f, in_f))
        if w.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            w = self.fp8_dequant(prefix, w)
        w = self._count(w.to(self.dtype))
        if finite:
            self.check_finite(name, w)
        b = self.tensor(f"{prefix}.bias", (out_f,)) if bias else None
        return w, b

    def fp8_dequant(self, prefix: str, w: torch.Tensor) -> torch.Tensor:
        if self.quant is None or self.quant.block is None:
            raise CheckpointError(
                f"{self.index.dir}: tensor {prefix}.weight is fp8 but config.json has no fp8 block size"
            )
        b0, b1 = self.quant.block
        R, C = w.shape[-2:]
        sname = f"{prefix}.weight_scale_inv"
        s = self.raw(sname, (*w.shape[:-2], -(-R // b0), -(-C // b1)))
        return fp8_block_dequant(w, s, self.quant.block)
