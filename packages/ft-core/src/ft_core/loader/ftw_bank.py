"""Expert banks in the format ``ft convert --format`` asks for, in the kernels' layout.

A bank (``experts/bank.py``) is converted one MoE layer at a time. ``auto`` (and a target equal to
the stored format) keeps the stored bytes. Otherwise every expert matrix is dequantised to exactly
the float32 values the kernels multiply (``ExpertBank.dequant``: the stored bf16, or the reference
dequantisation of fp8/mxfp4) and quantised with ``ft_kernels.quantize``, a few experts at a time
(its temporaries are ~30x the fp32 input). Quantisation is block-local, so the chunks give the
bytes one ``quantize`` call over the whole bank ``[N, rows, cols]`` would; for nvfp4 the one global
scale per matrix kind comes from the absmax of the whole bank (``bank_absmax``, a first pass),
passed in through one extra zero expert holding that absmax, which is then dropped.

Legend: N = flat ids of the chunk, R = rows, C = cols of one expert matrix, H = hidden, I = expert
intermediate.
"""

from __future__ import annotations

import torch

from ft_core.errors import FTError
from ft_core.experts.bank import KQUANT_FORMATS, ExpertBank

# `ft convert --format` name -> (ExpertBank / ft_kernels format, scale group); "fp8", "int4", "int8" are short names
TARGETS = {
    "bf16": ("bf16", 0),
    "f16": ("f16", 0),
    "fp8": ("fp8_e4m3", 128),
    "mxfp4": ("mxfp4", 32),
    "nvfp4": ("nvfp4", 16),
    "int4": ("int4_sym", 128),
    "int4_asym": ("int4_asym", 128),
    "int8": ("int8_sym", 32),
    "q4_k": ("q4_k", 256),
    "q5_k": ("q5_k", 256),
    "q6_k": ("q6_k", 256),
}
FORMATS = ("auto", *TARGETS)
_CHUNK_ELEMS = 1 << 22  # fp32 elements quantised per call


def check_format(fmt: str, hidden: int, inter: int) -> None:
    """FTError (listing the formats) for an unknown ``fmt`` or one the expert dimensions do not allow."""
    if fmt not in FORMATS:
        raise FTError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt in ("auto", "bf16", "f16", "fp8", "int8"):
        return
    need = {"mxfp4": 32, "nvfp4": 16, "q4_k": 256, "q5_k": 256, "q6_k": 256}.get(fmt, 2)
    if hidden % need or inter % need:
        raise FTError(
            f"--format {fmt} needs the expert dimensions (hidden {hidden}, intermediate {inter}) to be "
            f"multiples of {need}; choose another format"
        )


def keeps_stored(bank: ExpertBank, fmt: str) -> bool:
    """True when ``fmt`` asks for what the bank already holds (its bytes are written unchanged)."""
    return fmt == "auto" or (TARGETS[fmt][0] == bank.fmt and not bank.layer_fmts)


def bank_absmax(bank: ExpertBank) -> tuple[float, float]:
    """max |w| of the bank's w13 and w2 values (float32, as the kernels see them)."""
    return tuple(
        max((float(w.abs().max()) for w in _dequant_chunks(bank, which)), default=0.0)
        for which in ("w13", "w2")
    )


def convert_bank(
    bank: ExpertBank, fmt: str, absmax: tuple[float, float] | None = None
) -> ExpertBank:
    """The bank in ``fmt`` (a new ExpertBank; the same one when ``keeps_stored``). ``absmax``: the whole
    model's ``bank_absmax`` (needed by nvfp4, whose global scale spans every layer). Biases are kept."""
    if keeps_stored(bank, fmt):
        return bank
    kfmt, group = TARGETS[fmt]
    out: dict[str, torch.Tensor] = {}
    gscale = [1.0, 1.0]
    for k, which in enumerate(("w13", "w2")):
        parts = [
            _quantize(w, kfmt, group, absmax[k] if kfmt == "nvfp4" else None)
            for w in _dequant_chunks(bank, which)
        ]
        gscale[k] = parts[0].global_scale
        q = torch.cat([p.q for p in parts])
        if kfmt in ("bf16", "f16"):
            out[which] = q
            continue
        if kfmt in KQUANT_FORMATS:  # scales inside the blocks
            out[f"{which}_q"] = q
            continue
        scale = torch.cat([p.scale for p in parts])
        if kfmt == "fp8_e4m3":
            out[which], out[f"{which}_scale"] = q.view(torch.float8_e4m3fn), scale
        elif kfmt == "mxfp4":
            out[f"{which}_blocks"], out[f"{which}_scales"] = q.view(*q.shape[:2], -1, 16), scale
        else:
            out[f"{which}_q"], out[f"{which}_scale"] = q, scale
            if parts[0].zero is not None:
                out[f"{which}_zero"] = torch.cat([p.zero for p in parts])
    for k in ("w13_bias", "w2_bias"):
        if k in bank.tensors:
            out[k] = bank.tensors[k]
    return ExpertBank(
        kfmt,
        bank.num_experts,
        bank.hidden,
        bank.inter,
        bank.act,
        out,
        fp8_block=group if kfmt in ("fp8_e4m3", "int4_sym", "int4_asym", "int8_sym") else 0,
        global_scale=(gscale[0], gscale[1]) if kfmt == "nvfp4" else (1.0, 1.0),
    )


def _dequant_chunks(bank: ExpertBank, which: str):
    """Yield float32 [n, R, C] chunks of ``which`` over all flat ids, in order."""
    N = bank.num_ids
    t = bank.tensors.get(which)
    per = t[0].numel() if t is not None else 2 * bank.inter * bank.hidden
    step = max(1, _CHUNK_ELEMS // per)
    for a in range(0, N, step):
        yield bank.dequant(torch.arange(a, min(N, a + step)), which)


def _quantize(w: torch.Tensor, kfmt: str, group: int, absmax: float | None):
    """ft_kernels.quantize of ``w`` [n, R, C]; for nvfp4 with the global scale of ``absmax``."""
    from ft_kernels import quantize

    if kfmt in ("bf16", "f16"):
        return quantize(w, kfmt)
    if absmax is None:
        return quantize(w, kfmt, group)
    pad = torch.zeros(1, *w.shape[1:])
    pad[0, 0, 0] = (
        absmax  # >= every |w|: the global scale is absmax / (6 * 448), as for the whole bank
    )
    q = quantize(torch.cat([w, pad]), kfmt, group)
    return type(q)(q.fmt, q.q[:-1], q.cols, q.scale[:-1], None, q.group, q.global_scale)
