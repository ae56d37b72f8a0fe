"""Expert weight formats in the layout the CPU kernels read, and quantisers that produce them.

``ExpertWeights`` holds one matrix kind (w13 ``[N, 2I, H]`` or w2 ``[N, H, I]``) of every expert:
``q [N, rows, ...]`` packed weights, ``scale``/``zero`` ``[N, rows, ceil(cols / group)]``, an optional
fp32 ``bias [N, rows]``. Layout per format (``csrc/cpu/formats.h`` has the same table):

=========  ============================  ====================================  ===========================
format     q                             scale                                 value
=========  ============================  ====================================  ===========================
bf16/f16   [N, rows, cols] 16-bit        --                                    as stored
fp8_e4m3   [N, rows, cols] uint8         fp32, one per ``group`` columns       e4m3(q) * scale
mxfp4      [N, rows, cols/2] uint8       uint8 e8m0 per 32 columns             e2m1(q) * 2^(s - 127)
nvfp4      [N, rows, cols/2] uint8       uint8 e4m3 per 16 columns, global     e2m1(q) * e4m3(s) * global
int4_sym   [N, rows, cols/2] uint8       fp32 per ``group`` columns            (q - 8) * scale
int4_asym  [N, rows, cols/2] uint8       fp32 + uint8 zero per ``group``       (q - zero) * scale
int8_sym   [N, rows, cols] uint8 (int8)  fp32, one per ``group`` columns       int8(q) * scale
q4_k/q5_k  [N, rows, cols/256 * 144/176]  in the blocks (``kquants.py``)        d sc q - dmin m
q6_k       [N, rows, cols/256 * 210]     in the blocks                         d sc (q - 32)
q4_k_x16   [N, rows, cols/256 * 144]     q4_k, 16 rows interleaved (``kquants.to_x16``)  as q4_k
q5_k_x16   [N, rows, cols/256 * 176]     q5_k, 16 rows interleaved (``kquants.to_x16``)  as q5_k
q6_k_x16   [N, rows, cols/256 * 210]     q6_k, 16 rows interleaved (``kquants.to_x16``)  as q6_k
q3_k_x16   [N, rows, cols/256 * 110]     q3_k, 16 rows interleaved (``kquants.to_x16``)  as q3_k
mxfp4_x16  [N, rows, cols/2] uint8       as mxfp4, both 16 rows interleaved    as mxfp4
                                         (``nib_to_x16``)
int4_sym_  as int4_sym                   as int4_sym, both 16 rows interleaved  as int4_sym
x16                                      (``nib_to_x16``; group % 32 == 0);
                                         fp32 or f16 (``scales_f16``)
int8_sym_  as int8_sym, 16 rows          as int8_sym, 16 rows interleaved      as int8_sym
x16        interleaved (``int8_to_x16``)  (``nib_to_x16``; group % 32 == 0);
                                         fp32 or f16 (``scales_f16``)
fp8_e4m3_  as fp8_e4m3, 16 rows          as fp8_e4m3, 16 rows interleaved      as fp8_e4m3
x16        interleaved (``int8_to_x16``)  (``nib_to_x16``; group % 32 == 0);
                                         fp32 or f16 (``scales_f16``)
q3_k       [N, rows, cols/256 * 110]     in the blocks                         d (sc - 32) (q - 4)
q2_k       [N, rows, cols/256 * 84]      in the blocks                         d sc q - dmin m
=========  ============================  ====================================  ===========================

4-bit values are packed two per byte, column 2j in the low nibble. The K-quants are GGUF's super-blocks
of 256 columns exactly as llama.cpp stores them (``kquants.py``); their ``group`` is 256.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ft_kernels import _C, kquants

# name -> code of every weight format, from the C++ enum itself (cpu/formats.h: Fmt and fmt_name), so the two
# cannot drift apart: "bf16", "f16", "fp8_e4m3", "mxfp4", "nvfp4", "int4_sym", "int4_asym", "int8_sym",
# "q4_k", "q5_k", "q6_k", "q4_k_x16", "q3_k", "q2_k", "q6_k_x16", "mxfp4_x16", "int4_sym_x16", "int8_sym_x16",
# "fp8_e4m3_x16", "q5_k_x16", "q3_k_x16".
FORMATS = {name: code for code, name in enumerate(_C.format_names())}
# Layouts made at load for a faster kernel (rows in the lanes: bf16 activations on AMD's AVX-512 BF16, 16-bit ones
# elsewhere, int8 ones on x86), never stored nor offered as a format to convert or re-quantise to.
REPACKED = (
    "q4_k_x16",
    "q5_k_x16",
    "q6_k_x16",
    "q3_k_x16",
    "mxfp4_x16",
    "int4_sym_x16",
    "int8_sym_x16",
    "fp8_e4m3_x16",
)
DEFAULT_GROUP = {
    "fp8_e4m3": 128,
    "mxfp4": 32,
    "nvfp4": 16,
    "int4_sym": 128,
    "int4_asym": 128,
    "int8_sym": 32,
    "q4_k": 256,
    "q5_k": 256,
    "q6_k": 256,
    "q4_k_x16": 256,
    "q5_k_x16": 256,
    "q6_k_x16": 256,
    "q3_k_x16": 256,
    "mxfp4_x16": 32,
    "int4_sym_x16": 128,
    "int8_sym_x16": 32,
    "fp8_e4m3_x16": 128,
    "q3_k": 256,
    "q2_k": 256,
}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


@dataclass(frozen=True)
class ExpertWeights:
    fmt: str
    q: torch.Tensor
    cols: int
    scale: torch.Tensor | None = None
    zero: torch.Tensor | None = None
    group: int = 0
    global_scale: float = 1.0
    bias: torch.Tensor | None = None  # fp32 [N, rows]

    @property
    def rows(self) -> int:
        return self.q.shape[1]

    @property
    def num_experts(self) -> int:
        return self.q.shape[0]

    def nbytes_per_expert(self) -> int:
        """Bytes the kernel reads for one expert's matrix (weights, scales, zeros; bias excluded)."""
        return sum(
            t[0].numel() * t.element_size()
            for t in (self.q, self.scale, self.zero)
            if t is not None
        )


def _blocks(w: torch.Tensor, g: int) -> tuple[torch.Tensor, int]:
    """[N, R, C] -> [N, R, nb, g] zero-padded along C; returns the padded view and C."""
    N, R, C = w.shape
    nb = -(-C // g)
    pad = torch.zeros(N, R, nb * g, dtype=torch.float32)
    pad[..., :C] = w
    return pad.view(N, R, nb, g), C


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [N, R, C] (C even) -> [N, R, C/2], column 2j in the low nibble."""
    c = codes.to(torch.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).contiguous()


def nib_to_x16(t: torch.Tensor, scales: bool = False) -> torch.Tensor:
    """MXFP4 or INT4_SYM codes ``q`` uint8 [..., rows, cols/2], or their scales [..., rows, groups] (e8m0 bytes,
    fp32) where ``scales`` (rows % 16 == 0) -> the same as ``mxfp4_x16`` / ``int4_sym_x16``
    (``csrc/cpu/formats.h``), a new tensor of the same shape: per 16 rows and block of 32 columns, 256 code bytes
    (byte 64p + 4i + b of row i: low nibble column 8p + b, high 8p + 4 + b), per 16 rows and group 16 scales
    (row i's at i), the blocks and groups of each 16 rows in column order, the groups of 16 rows back to back."""
    *lead, rows, n = t.shape
    if rows % 16:
        raise ValueError(f"the 4-bit X16 formats need rows % 16 == 0, got {rows}")
    g = t.unflatten(-2, (rows // 16, 16))  # [.., G, 16 i, n]
    if scales:  # [.., G, i, nb] -> [.., G, nb, i]
        return g.transpose(-2, -1).reshape(t.shape).contiguous()
    codes = torch.stack([g & 15, g >> 4], -1).flatten(-2)  # [.., G, i, cols]
    c = codes.unflatten(-1, (n // 16, 4, 2, 4))  # [.., G, i, block j, p, lo/hi, b]
    return (c[..., 0, :] | (c[..., 1, :] << 4)).movedim(-4, -2).reshape(t.shape).contiguous()


def nib_from_x16(t: torch.Tensor, scales: bool = False) -> torch.Tensor:
    """The inverse of ``nib_to_x16`` for codes, or for scales where ``scales``."""
    *lead, rows, n = t.shape
    if scales:  # [.., G, nb, i] -> [.., G, i, nb]
        return t.reshape(*lead, rows // 16, n, 16).transpose(-2, -1).reshape(t.shape).contiguous()
    b = t.reshape(*lead, rows // 16, n // 16, 4, 16, 4).movedim(-2, -4)  # [.., G, i, j, p, b]
    codes = torch.stack([b & 15, b >> 4], -2).reshape(*lead, rows, 2 * n)  # column order
    return _pack_nibbles(codes)


BYTE_X16 = ("int8_sym_x16", "fp8_e4m3_x16")  # a byte a weight: int8_to_x16's layout


def int8_to_x16(t: torch.Tensor) -> torch.Tensor:
    """INT8_SYM or FP8_E4M3 bytes uint8 [..., rows, cols] (rows % 16 == 0, cols % 32 == 0) -> those of
    ``int8_sym_x16`` / ``fp8_e4m3_x16``
    (``csrc/cpu/formats.h``), a new tensor of the same shape: per 16 rows and 4 columns 64 bytes (byte 4i + b: row
    i's column 4p + b), in column order, the groups of 16 rows back to back. Its scales: ``nib_to_x16``."""
    *lead, rows, cols = t.shape
    if rows % 16 or cols % 32:
        raise ValueError(
            f"the 8-bit X16 formats need rows % 16 == 0 and cols % 32 == 0, got [{rows}, {cols}]"
        )
    g = t.reshape(*lead, rows // 16, 16, cols // 4, 4)  # [.., G, i, p, b]
    return g.transpose(-3, -2).reshape(t.shape).contiguous()


def int8_from_x16(t: torch.Tensor) -> torch.Tensor:
    """The inverse of ``int8_to_x16``."""
    *lead, rows, cols = t.shape
    g = t.reshape(*lead, rows // 16, cols // 4, 16, 4)  # [.., G, p, i, b]
    return g.transpose(-3, -2).reshape(t.shape).contiguous()


def scales_f16(scale: torch.Tensor | None) -> torch.Tensor | None:
    """fp32 scales of a group-scaled X16 matrix (``int4_sym_x16``, ``int8_sym_x16``, ``fp8_e4m3_x16``; any shape) as
    float16 where every one converts exactly -- GGUF Q4_0 / Q8_0's scales, f16 in the file, always do -- else
    ``scale`` itself, as it is for any scales not fp32 (MXFP4's e8m0 bytes; None). The kernels read either (half the scale bytes: Q4_0 4.5 bits a weight instead of 5); the
    values do not change."""
    if scale is None or scale.dtype != torch.float32 or scale.numel() == 0:
        return scale
    flat, half = scale.reshape(-1), torch.empty(scale.shape, dtype=torch.float16)
    out, step = half.view(-1), 1 << 22  # chunks: no full-size temporaries
    for i in range(0, flat.numel(), step):
        out[i : i + step] = flat[i : i + step]
        if not torch.equal(out[i : i + step].float(), flat[i : i + step]):
            return scale
    return half


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 code (sign bit 3) of each value (already divided by its scale; |v| <= 6)."""
    mag = (v.abs()[..., None] - E2M1).abs().argmin(-1)
    return (mag | ((v < 0).to(torch.int64) << 3)).to(torch.uint8)


def quantize(
    w: torch.Tensor, fmt: str, group: int | None = None, bias: torch.Tensor | None = None
) -> ExpertWeights:
    """Float weights ``[N, rows, cols]`` -> ExpertWeights in ``fmt`` (round to nearest; scales from absmax)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    w = w.float()
    N, R, C = w.shape
    b = None if bias is None else bias.float().contiguous()
    if fmt == "bf16":
        return ExpertWeights(fmt, w.bfloat16().contiguous(), C, bias=b)
    if fmt == "f16":
        return ExpertWeights(fmt, w.half().contiguous(), C, bias=b)
    if fmt in kquants.BLOCK_BYTES:
        return ExpertWeights(fmt, kquants.quantize(w, fmt), C, group=kquants.QK, bias=b)
    if fmt in ("mxfp4_x16", "int4_sym_x16", "int8_sym_x16", "fp8_e4m3_x16"):
        m = quantize(w, fmt.removesuffix("_x16"), group, bias)
        q = int8_to_x16(m.q) if fmt in BYTE_X16 else nib_to_x16(m.q)
        return dataclasses.replace(m, fmt=fmt, q=q, scale=nib_to_x16(m.scale, scales=True))
    if fmt in REPACKED:
        base = fmt.removesuffix("_x16")
        q = kquants.to_x16(kquants.quantize(w, base), C, base)
        return ExpertWeights(fmt, q, C, group=kquants.QK, bias=b)
    g = group or DEFAULT_GROUP[fmt]
    if fmt == "mxfp4":
        g = 32
    if fmt == "nvfp4":
        g = 16
    if fmt in ("mxfp4", "nvfp4", "int4_sym", "int4_asym") and C % 2:
        raise ValueError(f"{fmt} needs an even number of columns, got {C}")
    if fmt in ("mxfp4", "nvfp4") and C % g:
        raise ValueError(f"{fmt} needs columns divisible by {g}, got {C}")
    blk, _ = _blocks(w, g)
    amax = blk.abs().amax(-1)  # [N, R, nb]
    if fmt == "fp8_e4m3":
        scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        q = (w / scale.repeat_interleave(g, -1)[..., :C]).to(torch.float8_e4m3fn).view(torch.uint8)
        return ExpertWeights(fmt, q.contiguous(), C, scale.contiguous(), group=g, bias=b)
    if fmt == "int8_sym":  # GGUF Q8_0's rule at group 32: d = max|w| / 127, q = round(w / d)
        scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
        q = torch.round(w / scale.repeat_interleave(g, -1)[..., :C]).clamp(-127, 127)
        q = q.to(torch.int8).view(torch.uint8)
        return ExpertWeights(fmt, q.contiguous(), C, scale.contiguous(), group=g, bias=b)
    if fmt == "mxfp4":
        e = torch.ceil(torch.log2(torch.where(amax > 0, amax / 6.0, torch.ones_like(amax)))).clamp(
            -127, 127
        )
        codes = e2m1_codes((blk / torch.exp2(e)[..., None]).view(N, R, C))
        return ExpertWeights(
            fmt, _pack_nibbles(codes), C, (e + 127).to(torch.uint8).contiguous(), group=g, bias=b
        )
    if fmt == "nvfp4":
        gmax = float(w.abs().max())
        gs = gmax / (6.0 * 448.0) if gmax > 0 else 1.0
        s8 = (amax / 6.0 / gs).to(torch.float8_e4m3fn)
        sf = s8.float() * gs
        codes = e2m1_codes(
            (blk / torch.where(sf > 0, sf, torch.ones_like(sf))[..., None])
            .clamp(-6, 6)
            .view(N, R, C)
        )
        return ExpertWeights(
            fmt,
            _pack_nibbles(codes),
            C,
            s8.view(torch.uint8).contiguous(),
            group=g,
            global_scale=gs,
            bias=b,
        )
    if fmt == "int4_sym":
        scale = torch.where(amax > 0, amax / 7.0, torch.ones_like(amax))
        codes = (torch.round(blk / scale[..., None]).clamp(-8, 7) + 8).view(N, R, -1)[..., :C]
        return ExpertWeights(fmt, _pack_nibbles(codes), C, scale.contiguous(), group=g, bias=b)
    lo, hi = blk.amin(-1), blk.amax(-1)
    if C % g:  # padding zeros must not widen the last group's range
        last = w[..., (C // g) * g :]
        lo[..., -1], hi[..., -1] = last.amin(-1), last.amax(-1)
    lo, hi = torch.minimum(lo, torch.zeros_like(lo)), torch.maximum(hi, torch.zeros_like(hi))
    scale = torch.where(hi > lo, (hi - lo) / 15.0, torch.ones_like(hi))
    zero = torch.round(-lo / scale).clamp(0, 15)
    codes = (
        (torch.round(blk / scale[..., None]) + zero[..., None]).clamp(0, 15).view(N, R, -1)[..., :C]
    )
    return ExpertWeights(
        fmt,
        _pack_nibbles(codes),
        C,
        scale.contiguous(),
        zero.to(torch.uint8).contiguous(),
        group=g,
        bias=b,
    )
