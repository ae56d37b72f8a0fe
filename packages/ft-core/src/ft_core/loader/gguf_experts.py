"""A GGUF model's routed experts (``blk.N.ffn_{gate,up,down}_exps``: [E, I, H], [E, I, H], [E, H, I]) as
one ExpertBank. Types the kernels read as they are stay in their bits, repacked only:

  Q4_0   blocks of 32: f16 d, 16 bytes; element j < 16 the low nibble of byte j, j >= 16 the high
         nibble of byte j - 16; value (q - 8) d            -> int4_sym, group 32, fp32 scale d (exact)
  MXFP4  blocks of 32: e8m0 byte e, 16 bytes as Q4_0's; value e2m1(q) 2^(e - 127)
                                                           -> mxfp4 (exact)
  Q8_0   blocks of 32: f16 d, 32 int8 q; value q d         -> int8_sym, group 32, fp32 scale d (exact)
  BF16 / F16 / F32                                         -> the bank's own float format

Every other type (Q4_1, Q5_0, Q5_1, the K-quants …) is dequantised with llama.cpp's own
``gguf.quants.dequantize`` into an f32 bank: exact, but 2-8x the file's bytes -- said in a log line.
A bank takes one format: when the three kinds differ (Q4_K_M mixes Q4_K and Q6_K), the f32 one.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ft_core.errors import CheckpointError
from ft_core.experts.bank import FLOAT_FORMATS, ExpertBank
from ft_core.loader.gguf_file import STORED, GGUFFile, GGUFTensor

log = logging.getLogger("ft_core.loader")
KINDS = ("gate", "up", "down")
_NATIVE = {"Q4_0": "int4_sym", "MXFP4": "mxfp4", "Q8_0": "int8_sym"}  # GGML type -> bank format
_DTYPES = {f: dt for dt, f in FLOAT_FORMATS.items()}  # float bank format -> torch dtype


def _nibbles_to_pairs(qs: np.ndarray) -> np.ndarray:
    """[..., 16] GGML block bytes (low nibbles = elements 0..15, high = 16..31) -> [..., 16] bytes of
    the kernels' packing (element 2k in the low nibble of byte k, 2k + 1 in the high one)."""
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # [..., 32] element order
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _blocks(t: GGUFTensor, block_bytes: int) -> np.ndarray:
    """A quantised [E, rows, cols] tensor's bytes as [E, rows, cols / 32, block_bytes]."""
    E, rows, cols = t.shape
    if cols % 32:
        raise CheckpointError(
            f"{t.file}: tensor {t.name!r}: {cols} columns is not whole blocks of 32"
        )
    return np.asarray(t.data).reshape(E, rows, cols // 32, block_bytes)


def _f16_scales(b: np.ndarray) -> np.ndarray:
    """The f16 d leading each block of ``b`` [..., nb, block bytes], as float32 [..., nb] (exact)."""
    return b[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)


def _kind_tensors(t: GGUFTensor, fmt: str, prefix: str) -> dict[str, torch.Tensor]:
    """One expert kind ([E, rows, cols]) in bank format ``fmt`` under names ``prefix``_*."""
    if fmt == "int4_sym":
        b = _blocks(t, 18)
        q = _nibbles_to_pairs(b[..., 2:]).reshape(*b.shape[:2], -1)
        return {
            f"{prefix}_q": torch.from_numpy(q),
            f"{prefix}_scale": torch.from_numpy(_f16_scales(b)),
        }
    if fmt == "int8_sym":
        b = _blocks(t, 34)
        q = np.ascontiguousarray(b[..., 2:]).reshape(
            *b.shape[:2], -1
        )  # int8 bits, columns in order
        return {
            f"{prefix}_q": torch.from_numpy(q),
            f"{prefix}_scale": torch.from_numpy(_f16_scales(b)),
        }
    if fmt == "mxfp4":
        b = _blocks(t, 17)
        return {
            f"{prefix}_blocks": torch.from_numpy(_nibbles_to_pairs(b[..., 1:])),
            f"{prefix}_scales": torch.from_numpy(b[..., 0].copy()),
        }
    return {prefix: t.to_torch().to(_DTYPES[fmt])}


def gguf_bank(
    g: GGUFFile, layers: list[int], num_experts: int, hidden: int, inter: int, act: str = "swiglu"
) -> ExpertBank:
    """Every MoE layer's experts (``layers``: the GGUF block numbers of the MoE layers, in order) in one
    ExpertBank of ``len(layers) * num_experts`` flat ids (w13 = gate rows, then up rows; ``act``
    "gptoss" for GPT-OSS, whose experts also have biases: ``ffn_*_exps.bias``, float32)."""
    want = {"gate": (num_experts, inter, hidden), "up": (num_experts, inter, hidden),
            "down": (num_experts, hidden, inter)}  # fmt: skip
    types = set()
    for n in layers:
        for k in KINDS:
            t = g.tensor(f"blk.{n}.ffn_{k}_exps.weight")
            if t.shape != want[k]:
                raise CheckpointError(
                    f"{t.file}: tensor {t.name!r} has shape {list(t.shape)}, expected {list(want[k])} "
                    "(experts, rows, columns) from the metadata"
                )
            types.add(t.type_name)
    ty = next(iter(types)) if len(types) == 1 else None
    if ty in _NATIVE:
        fmt = _NATIVE[ty]
    elif ty in STORED:
        fmt = FLOAT_FORMATS[STORED[ty]]
    else:
        fmt = "f32"
        log.warning(
            "%s: expert weights in %s are dequantised to float32 at load (%s); kernels for them "
            "are not built yet", g.path, "/".join(sorted(types)), "exact, but several times the file's size",
        )  # fmt: skip
    tensors: dict[str, torch.Tensor] = {}
    E = num_experts
    # layer by layer into preallocated tensors (w13: gate rows, then up rows): no second copy of the bank
    for m, n in enumerate(layers):
        parts = {}
        for k in KINDS:
            t = g.tensor(f"blk.{n}.ffn_{k}_exps.weight")
            parts[k] = _kind_tensors(t, fmt, k)
            t.release()  # copied: its file pages leave the process
        rows = slice(m * E, (m + 1) * E)
        for key, gate in parts["gate"].items():
            suffix = key[len("gate") :]
            up, down = parts["up"]["up" + suffix], parts["down"]["down" + suffix]
            if "w13" + suffix not in tensors:
                w13_shape = (len(layers) * E, gate.shape[1] + up.shape[1], *gate.shape[2:])
                tensors["w13" + suffix] = torch.empty(w13_shape, dtype=gate.dtype)
                tensors["w2" + suffix] = torch.empty(
                    (len(layers) * E, *down.shape[1:]), dtype=down.dtype
                )
            tensors["w13" + suffix][rows, : gate.shape[1]] = gate
            tensors["w13" + suffix][rows, gate.shape[1] :] = up
            tensors["w2" + suffix][rows] = down
    if f"blk.{layers[0]}.ffn_gate_exps.bias" in g.tensors:
        bias = {k: [g.tensor(f"blk.{n}.ffn_{k}_exps.bias").to_torch().float() for n in layers]
                for k in KINDS}  # fmt: skip
        tensors["w13_bias"] = torch.cat(
            [torch.cat(gu, dim=1) for gu in zip(bias["gate"], bias["up"])]
        )
        tensors["w2_bias"] = torch.cat(bias["down"])
    group = 32 if fmt in ("int4_sym", "int8_sym") else 0
    return ExpertBank(fmt, num_experts, hidden, inter, act, tensors, fp8_block=group)
