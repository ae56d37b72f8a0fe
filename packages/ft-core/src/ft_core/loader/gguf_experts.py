"""A GGUF model's routed experts (``blk.N.ffn_{gate,up,down}_exps``: [E, I, H], [E, I, H], [E, H, I]) as
one ExpertBank. Types the kernels read as they are stay in their bits, repacked only:

  Q4_0   blocks of 32: f16 d, 16 bytes; element j < 16 the low nibble of byte j, j >= 16 the high
         nibble of byte j - 16; value (q - 8) d            -> int4_sym, group 32, fp32 scale d (exact)
  MXFP4  blocks of 32: e8m0 byte e, 16 bytes as Q4_0's; value e2m1(q) 2^(e - 127)
                                                           -> mxfp4 (exact)
  Q8_0   blocks of 32: f16 d, 32 int8 q; value q d         -> int8_sym, group 32, fp32 scale d (exact)
  Q4_K / Q5_K / Q6_K  super-blocks of 256, scales inside   -> q4_k / q5_k / q6_k, the bytes as stored
  Q3_K / Q2_K         super-blocks of 256, scales inside   -> q3_k / q2_k, the bytes as stored
  BF16 / F16 / F32                                         -> the bank's own float format

K-quant files mix types by layer (Q4_K_M: ffn_down of some layers in Q6_K, the rest Q4_K; Q3_K_M: Q3_K,
Q4_K and Q5_K): such a bank records each layer's (w13, w2) format (``ExpertBank.layer_fmts``), each kind's
tensor as wide as its widest layer's rows, each layer's rows gapless (``ExpertBank.compact``). Every other type or mix (Q4_1, Q5_0, Q5_1, the IQ types, gate != up,
K-quants beside other types …) is dequantised with llama.cpp's own ``gguf.quants.dequantize`` into an f32
bank: exact, but 2-8x the file's bytes -- said in a log line.
"""

from __future__ import annotations

import logging
import warnings

import ft_kernels
import numpy as np
import torch

from ft_core.errors import CheckpointError
from ft_core.experts.bank import FLOAT_FORMATS, KQUANT_FORMATS, ExpertBank, compact_view
from ft_core.loader.gguf_file import STORED, GGUFFile, GGUFTensor

log = logging.getLogger("ft_core.loader")
KINDS = ("gate", "up", "down")
_NATIVE = {"Q4_0": "int4_sym", "MXFP4": "mxfp4", "Q8_0": "int8_sym"}  # GGML type -> bank format
_KQUANT = {
    "Q4_K": "q4_k",
    "Q5_K": "q5_k",
    "Q6_K": "q6_k",
    "Q3_K": "q3_k",
    "Q2_K": "q2_k",
}  # may mix by layer and kind
_DTYPES = {f: dt for dt, f in FLOAT_FORMATS.items()}  # float bank format -> torch dtype
CHUNK_BYTES = 64 << 20  # file bytes of one layer's experts converted at a time (bounds temporaries)


def _blocks(t: GGUFTensor) -> np.ndarray:
    """A Q4_0 / Q8_0 / MXFP4 [E, rows, cols] tensor's bytes as [E, rows, cols / 32, block bytes]."""
    block_bytes = {"Q4_0": 18, "Q8_0": 34, "MXFP4": 17}[t.type_name]
    E, rows, cols = t.shape
    if cols % 32:
        raise CheckpointError(
            f"{t.file}: tensor {t.name!r}: {cols} columns is not whole blocks of 32"
        )
    return np.asarray(t.data).reshape(E, rows, cols // 32, block_bytes)


def _split(b: np.ndarray, head_bytes: int, nibbles: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """GGML blocks ``b`` [..., block bytes] (contiguous; may be the file's read-only mapping, only read) split on
    the kernel pool into new (codes, heads) tensors: ``ft_kernels.split_blocks``."""
    with warnings.catch_warnings():  # the file's read-only pages: only read
        warnings.simplefilter("ignore", UserWarning)
        return ft_kernels.split_blocks(torch.from_numpy(b), head_bytes, nibbles)


def _repack_blocks(b: np.ndarray, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_0 (``fmt`` int4_sym) or Q8_0 (int8_sym) blocks ``b`` [..., rows, nb, block bytes] -> the
    kernels' (q [..., rows, row bytes], fp32 scale [..., rows, nb]: the f16 d of each block), exact."""
    q, d = _split(b, 2, fmt == "int4_sym")  # int8: columns in order
    return q.reshape(*b.shape[:-2], -1), d.view(torch.float16)[..., 0].float()


def _kind_tensors(t: GGUFTensor, fmt: str, prefix: str, ex: slice) -> dict[str, torch.Tensor]:
    """Experts ``ex`` of one expert kind ([E, rows, cols]) in bank format ``fmt`` under names
    ``prefix``_*: new tensors, or read-only views of the file's mapping (K-quants, stored floats) to be
    copied before ``t.release()``."""
    if fmt in ("int4_sym", "int8_sym"):
        q, scale = _repack_blocks(_blocks(t)[ex], fmt)
        return {f"{prefix}_q": q, f"{prefix}_scale": scale}
    if fmt in KQUANT_FORMATS:  # super-blocks as stored, one row of blocks per weight row
        E, rows, _ = t.shape
        with warnings.catch_warnings():  # the file's read-only pages: only read, into the bank
            warnings.simplefilter("ignore", UserWarning)
            return {f"{prefix}_q": torch.from_numpy(np.asarray(t.data).reshape(E, rows, -1)[ex])}
    if fmt == "mxfp4":
        codes, e = _split(_blocks(t)[ex], 1, True)
        return {f"{prefix}_blocks": codes, f"{prefix}_scales": e[..., 0]}
    v = t.values(ex, _DTYPES[fmt])  # stored floats: a view; else dequantised into the bank's dtype
    return {prefix: v.to(_DTYPES[fmt])}


def gguf_bank(
    g: GGUFFile, layers: list[int], num_experts: int, hidden: int, inter: int, act: str = "swiglu"
) -> ExpertBank:
    """Every MoE layer's experts (``layers``: the GGUF block numbers of the MoE layers, in order) in one
    ExpertBank of ``len(layers) * num_experts`` flat ids (w13 = gate rows, then up rows; ``act``
    "gptoss" for GPT-OSS, whose experts also have biases: ``ffn_*_exps.bias``, float32)."""
    want = {"gate": (num_experts, inter, hidden), "up": (num_experts, inter, hidden),
            "down": (num_experts, hidden, inter)}  # fmt: skip
    kind_types = {}  # (block, kind) -> GGML type name
    for n in layers:
        for k in KINDS:
            t = g.tensor(f"blk.{n}.ffn_{k}_exps.weight")
            if t.shape != want[k]:
                raise CheckpointError(
                    f"{t.file}: tensor {t.name!r} has shape {list(t.shape)}, expected {list(want[k])} "
                    "(experts, rows, columns) from the metadata"
                )
            kind_types[n, k] = t.type_name
    types = set(kind_types.values())
    # mixed or not, and the row widths, over every MoE layer of the file: a bank of some layers (ft
    # convert writes one layer at a time) is laid out as the whole model's
    every = sorted({int(x.split(".")[1]) for x in g.tensors if x.endswith(".ffn_gate_exps.weight")})
    every_types = {
        (n, k): g.tensor(f"blk.{n}.ffn_{k}_exps.weight").type_name for n in every for k in KINDS
    }
    model_fmts = _kquant_layer_fmts(every_types, every)
    layer_fmts = None
    if model_fmts is not None and _kquant_layer_fmts(kind_types, layers) is not None:
        layer_fmts = [model_fmts[every.index(n)] for n in layers]
    ty = next(iter(types)) if len(types) == 1 else None
    if layer_fmts is not None:
        fmt = layer_fmts[0][0]
        if all(p == (fmt, fmt) for p in model_fmts):
            layer_fmts = None  # one format throughout the model: a plain bank
    elif ty in _NATIVE:
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
    # layer by layer, CHUNK_BYTES of the file at a time, into preallocated tensors (w13: gate rows, then
    # up rows): no second copy of the bank, no whole layer of temporaries or of the file's pages
    for m, n in enumerate(layers):
        files = [g.tensor(f"blk.{n}.ffn_{k}_exps.weight") for k in KINDS]
        kfmts = [_KQUANT[t.type_name] if layer_fmts else fmt for t in files]
        step = max(1, CHUNK_BYTES * E // sum(t.data.nbytes for t in files))
        for e0 in range(0, E, step):
            ex = slice(e0, min(E, e0 + step))
            parts = {k: _kind_tensors(t, f, k, ex) for k, t, f in zip(KINDS, files, kfmts)}
            _place(tensors, parts, m, e0, E, len(layers), layer_fmts and model_fmts, hidden, inter)
            for t in files:  # copied: these pages of the file leave the process
                t.release(ex)
        for t in files:  # and those the kernel's fault-around mapped again behind a chunk
            t.release()
    if f"blk.{layers[0]}.ffn_gate_exps.bias" in g.tensors:
        bias = {k: [g.tensor(f"blk.{n}.ffn_{k}_exps.bias").to_torch().float() for n in layers]
                for k in KINDS}  # fmt: skip
        tensors["w13_bias"] = torch.cat(
            [torch.cat(gu, dim=1) for gu in zip(bias["gate"], bias["up"])]
        )
        tensors["w2_bias"] = torch.cat(bias["down"])
    group = 32 if fmt in ("int4_sym", "int8_sym") else 0
    return ExpertBank(
        fmt, num_experts, hidden, inter, act, tensors, fp8_block=group,
        layer_fmts=layer_fmts or (), compact=bool(layer_fmts),
    )  # fmt: skip


def _place(
    tensors: dict, parts: dict, m: int, e0: int, E: int, L: int, model_fmts, hidden: int, inter: int
) -> None:
    """Copy one chunk of MoE layer ``m``'s experts (``parts``: kind -> name -> [n, rows, ...], experts
    ``e0`` .. ``e0 + n`` of ``E``) into the bank's ``tensors``, allocating them ([L * E, ...]) on first
    use. ``model_fmts`` (mixed K-quant banks): tensors as wide as the widest layer's rows, each layer's
    rows gapless at the start of its region (``ExpertBank.compact``; the rest is never touched)."""
    at, N = m * E + e0, L * E
    for key, gate in parts["gate"].items():
        suffix = key[len("gate") :]
        up, down = parts["up"]["up" + suffix], parts["down"]["down" + suffix]
        if "w13" + suffix not in tensors:
            w13_shape = (N, gate.shape[1] + up.shape[1], *gate.shape[2:])
            w2_shape = (N, *down.shape[1:])
            if model_fmts:
                w13_shape = (*w13_shape[:2], _widest(model_fmts, 0, hidden))
                w2_shape = (*w2_shape[:2], _widest(model_fmts, 1, inter))
            tensors["w13" + suffix] = torch.empty(w13_shape, dtype=gate.dtype)
            tensors["w2" + suffix] = torch.empty(w2_shape, dtype=down.dtype)
        rows = slice(at, at + gate.shape[0])
        w13, w2 = tensors["w13" + suffix], tensors["w2" + suffix]
        if model_fmts:  # [N, rows, this layer's row bytes] over flat ids
            w13 = compact_view(w13, m, E, gate.shape[-1])
            w2 = compact_view(w2, m, E, down.shape[-1])
        w13, w2 = w13[rows], w2[rows]
        w13[:, : gate.shape[1]] = gate
        w13[:, gate.shape[1] :] = up
        w2[:] = down


def _kquant_layer_fmts(kind_types: dict, layers: list[int]) -> list[tuple[str, str]] | None:
    """Each MoE layer's (w13, w2) K-quant format when every expert tensor is a K-quant the kernels read
    and gate and up agree in each layer; else None."""
    if any(ty not in _KQUANT for ty in kind_types.values()):
        return None
    out = []
    for n in layers:
        if kind_types[n, "gate"] != kind_types[n, "up"]:
            return None
        out.append((_KQUANT[kind_types[n, "gate"]], _KQUANT[kind_types[n, "down"]]))
    return out


def _widest(layer_fmts: list[tuple[str, str]], kind: int, cols: int) -> int:
    """Row bytes of the widest format of ``kind`` (0: w13, 1: w2) over the layers, ``cols`` columns."""
    from ft_kernels.kquants import BLOCK_BYTES, QK

    return cols // QK * max(BLOCK_BYTES[p[kind]] for p in layer_fmts)


# GGML type -> the kernel format holding a dense weight of it exactly
DENSE_TYPES = {"Q4_0": "int4_sym", "Q8_0": "int8_sym", **_KQUANT}


def dense_matrix(raw: np.ndarray, type_name: str, cols: int, release=None):
    """One dense weight's stored rows ``raw`` uint8 [R, row bytes] of GGML type ``type_name`` (may be a
    view of the file's mapping) as an ``ft_kernels.ExpertWeights`` of one matrix [1, R, cols] holding
    the same values in memory of its own; None for types no kernel reads as stored (they stay
    dequantised). ``release(rows)``, if given, is called for each slice of rows once copied (K-quants:
    copied CHUNK_BYTES at a time, so a large matrix -- a 150k-token LM head -- never has all of its file
    pages and its copy resident at once)."""
    from ft_kernels import ExpertWeights
    from ft_kernels.kquants import QK

    fmt = DENSE_TYPES.get(type_name)
    if fmt is None:
        return None
    if fmt in KQUANT_FORMATS:
        out = np.empty(raw.shape, np.uint8)
        step = max(1, CHUNK_BYTES // max(1, raw.shape[1]))
        for lo in range(0, raw.shape[0], step):
            out[lo : lo + step] = raw[lo : lo + step]
            if release is not None:
                release(slice(lo, lo + step))
        return ExpertWeights(fmt, torch.from_numpy(out)[None], cols, group=QK)
    b = raw.reshape(1, raw.shape[0], cols // 32, 18 if fmt == "int4_sym" else 34)  # Q4_0 / Q8_0
    q, scale = _repack_blocks(b, fmt)
    return ExpertWeights(fmt, q, cols, scale, group=32)
