"""GGUF's K-quant super-blocks (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K) in torch: the reference decoder the kernels are
tested against and a quantiser that writes valid blocks. Layouts as llama.cpp's ggml-common.h (and
``csrc/cpu/formats.h``); one row of ``cols`` columns is ``cols / 256`` blocks of ``BLOCK_BYTES[fmt]``:

- ``q4_k`` 144 B: f16 d, f16 dmin, 12 B of 6-bit (scale, min) pairs for 8 sub-blocks of 32 columns,
  128 B of nibbles (columns 64j.. the low nibbles of bytes 32j.., columns 64j + 32.. the high ones);
  value ``d * sc * q - dmin * m``
- ``q5_k`` 176 B: as q4_k with 32 B of fifth bits before the nibbles (bit s of byte l: column 32s + l)
- ``q6_k`` 210 B: 128 B of low nibbles, 64 B of 2-bit high parts, 16 int8 scales (one per 16 columns),
  f16 d; value ``d * sc * (q - 32)``
- ``q3_k`` 110 B: 32 B of high bits (hmask), 64 B of 2-bit low parts, 12 B of 6-bit scales (one per 16
  columns), f16 d; column 128n + 32j + l: bits 2j of byte 32n + l of the low parts, bit 4n + j of hmask
  byte l; value ``d * (sc - 32) * (low + 4 high - 4)``
- ``q2_k`` 84 B: 16 B of (4-bit scale | 4-bit min << 4), one per 16 columns, 64 B of 2-bit codes (as q3_k's
  low parts), f16 d, f16 dmin; value ``d * sc * q - dmin * m``

Every product in the values is exact in float32 (f16 times <= 8-bit times <= 6-bit integers), so the
decoder below and the kernels agree bit for bit. The quantiser is the plain absmax / min-max rule, not
llama.cpp's search for the best scales: valid blocks of the right statistics, for tests and conversion.
"""

from __future__ import annotations

import torch

QK = 256
BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210, "q3_k": 110, "q2_k": 84}
X16 = ("q4_k_x16", "q5_k_x16", "q6_k_x16", "q3_k_x16")  # 16 rows interleaved at load (to_x16)
FORMATS = (
    *BLOCK_BYTES,
    *X16,
)  # every K-quant kernel format: blocks of 256 columns carrying their scales


# byte offsets of each block's f16 fields: (d, dmin) or (d,)
F16_AT = {"q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,), "q3_k": (108,), "q2_k": (80, 82)}


def _f16(b: torch.Tensor) -> torch.Tensor:
    """[..., 2] uint8 (little-endian f16 bits) -> float32 [...]."""
    return b.contiguous().view(torch.float16)[..., 0].float()


def _scale_min(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., 12] packed scale bytes -> (sc, m) int64 [..., 8]."""
    s = s.long()
    d, m, md = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    sc = torch.cat([d & 63, (md & 15) | ((d >> 6) << 4)], -1)
    mn = torch.cat([m & 63, (md >> 4) | ((m >> 6) << 4)], -1)
    return sc, mn


def _pack_scale_min(sc: torch.Tensor, mn: torch.Tensor) -> torch.Tensor:
    """(sc, m) integers in 0..63 [..., 8] -> [..., 12] uint8 (inverse of ``_scale_min``)."""
    lo = (sc[..., :4] & 63) | ((sc[..., 4:] >> 4) << 6)
    mid = (mn[..., :4] & 63) | ((mn[..., 4:] >> 4) << 6)
    hi = (sc[..., 4:] & 15) | ((mn[..., 4:] & 15) << 4)
    return torch.cat([lo, mid, hi], -1).to(torch.uint8)


def super_scales(q: torch.Tensor, fmt: str, cols: int) -> torch.Tensor:
    """The f16 super-block scales of blocks ``q`` uint8 [..., row bytes] as float32 [..., cols / 256, n]:
    (d, dmin) for q4_k / q5_k / q2_k, (d,) for q6_k / q3_k. Every value of a block is finite exactly when these are
    (the other factors are small integers), so they check a stored matrix without decoding it."""
    lead = q.shape[:-1]
    b = q[..., : cols // QK * BLOCK_BYTES[fmt]].reshape(*lead, cols // QK, BLOCK_BYTES[fmt])
    offs = F16_AT[fmt]
    return torch.stack([_f16(b[..., o : o + 2]) for o in offs], -1)


def dequantize(q: torch.Tensor, fmt: str, cols: int) -> torch.Tensor:
    """Blocks ``q`` uint8 [..., cols / 256 * BLOCK_BYTES[fmt]] (rows may be padded at the end, as in mixed
    banks) -> float32 [..., cols]."""
    lead = q.shape[:-1]
    b = q[..., : cols // QK * BLOCK_BYTES[fmt]].reshape(*lead, cols // QK, BLOCK_BYTES[fmt])
    if fmt in ("q3_k", "q2_k"):
        if fmt == "q3_k":
            sc = _q3k_scales(b[..., 96:108]).float() - 32.0
            d = _f16(b[..., 108:110])[..., None] * sc  # [..., nb, 16]
            w = d.repeat_interleave(16, -1) * (_q3k_codes(b[..., :96]) - 4).float()
        else:
            low = _codes2(b[..., 16:80])  # [..., nb, 256]
            s = b[..., :16].long()
            d = _f16(b[..., 80:82])[..., None] * (s & 15).float()
            dm = _f16(b[..., 82:84])[..., None] * (s >> 4).float()
            w = d.repeat_interleave(16, -1) * low.float() - dm.repeat_interleave(16, -1)
        return w.reshape(*lead, cols)
    if fmt == "q6_k":
        sc = b[..., 192:208].view(torch.int8).float()
        d = _f16(b[..., 208:210])[..., None] * sc  # [..., nb, 16]
        codes = _q6k_codes(b[..., :192]) - 32  # [..., nb, 256]
        w = d.repeat_interleave(16, -1) * codes.float()
        return w.reshape(*lead, cols)
    sc, mn = _scale_min(b[..., 4:16])
    d = _f16(b[..., 0:2])[..., None] * sc.float()  # [..., nb, 8]
    dm = _f16(b[..., 2:4])[..., None] * mn.float()
    codes = _q5k_codes(b[..., 16:]) if fmt == "q5_k" else _q4k_codes(b[..., 16:].long())
    w = d.repeat_interleave(32, -1) * codes.float() - dm.repeat_interleave(32, -1)
    return w.reshape(*lead, cols)


def quantize(w: torch.Tensor, fmt: str) -> torch.Tensor:
    """Float weights [..., cols] (cols % 256 == 0) -> blocks uint8 [..., cols / 256 * BLOCK_BYTES[fmt]]."""
    cols = w.shape[-1]
    if cols % QK:
        raise ValueError(f"{fmt} needs columns in whole super-blocks of {QK}, got {cols}")
    lead = w.shape[:-1]
    x = w.float().reshape(*lead, cols // QK, QK)
    if fmt == "q3_k":
        sub = x.unflatten(-1, (16, 16))
        at = sub.abs().argmax(-1, keepdim=True)
        # signed step: the largest |x| of a sub-block at code -4
        sv = -sub.gather(-1, at)[..., 0] / 4.0
        d = (sv.abs().amax(-1) / 31.0).half()  # scales - 32 in -32..31
        sc = torch.round(sv / _nonzero(d)[..., None]).clamp(-32, 31).long()
        step = d.float()[..., None] * sc
        step = torch.where(step != 0, step, torch.ones_like(step))
        codes = (torch.round(sub / step[..., None]).clamp(-4, 3).long() + 4).flatten(-2)  # 0..7
        parts = [*_pack_q3k_codes(codes), _pack_q3k_scales(sc + 32), _f16_bytes(d)]
        return torch.cat(parts, -1).to(torch.uint8).reshape(*lead, -1)
    if fmt == "q2_k":
        sub = x.unflatten(-1, (16, 16))
        lo = sub.amin(-1).clamp(max=0.0)
        hi = sub.amax(-1).clamp(min=0.0)
        step_f, min_f = (hi - lo) / 3, -lo  # value = step * q - min
        d = (step_f.amax(-1) / 15.0).half()
        dmin = (min_f.amax(-1) / 15.0).half()
        sc = torch.round(step_f / _nonzero(d)[..., None]).clamp(0, 15).long()
        mn = torch.round(min_f / _nonzero(dmin)[..., None]).clamp(0, 15).long()
        step = _nonzero(d.float()[..., None] * sc)
        codes = torch.round((sub + (dmin.float()[..., None] * mn)[..., None]) / step[..., None])
        codes = codes.clamp(0, 3).long().flatten(-2)
        parts = [sc | (mn << 4), _pack_codes2(codes), _f16_bytes(d), _f16_bytes(dmin)]
        return torch.cat(parts, -1).to(torch.uint8).reshape(*lead, -1)
    if fmt == "q6_k":
        sub = x.unflatten(-1, (16, 16))
        amax = sub.abs().amax(-1)  # [..., nb, 16]
        d = (amax.amax(-1) / (31.0 * 127.0)).half()  # scales up to 127, codes up to 31 (or -32)
        dsafe = torch.where(d.float() > 0, d.float(), torch.ones_like(d.float()))
        sc = torch.round(amax / 31.0 / dsafe[..., None]).clamp(-128, 127)
        step = dsafe[..., None] * sc
        step = torch.where(step > 0, step, torch.ones_like(step))
        codes = (torch.round(sub / step[..., None]).clamp(-32, 31) + 32).long().flatten(-2)
        sc8 = sc.to(torch.int8).view(torch.uint8).long()
        blk = torch.cat([_pack_q6k_codes(codes), sc8, _f16_bytes(d)], -1)
        return blk.to(torch.uint8).reshape(*lead, -1)
    top = 15 if fmt == "q4_k" else 31
    sub = x.unflatten(-1, (8, 32))
    lo = sub.amin(-1).clamp(max=0.0)
    hi = sub.amax(-1).clamp(min=0.0)
    step_f, min_f = (hi - lo) / top, -lo  # value = step * q - min
    d = (step_f.amax(-1) / 63.0).half()
    dmin = (min_f.amax(-1) / 63.0).half()
    sc = torch.round(step_f / _nonzero(d)[..., None]).clamp(0, 63).long()
    mn = torch.round(min_f / _nonzero(dmin)[..., None]).clamp(0, 63).long()
    step = d.float()[..., None] * sc
    codes = torch.round(
        (sub + (dmin.float()[..., None] * mn)[..., None]) / _nonzero(step)[..., None]
    )
    codes = codes.clamp(0, top).long().flatten(-2)  # [..., nb, 256]
    c4 = codes & 15
    qs = c4.unflatten(-1, (4, 2, 32))[..., 0, :] | (c4.unflatten(-1, (4, 2, 32))[..., 1, :] << 4)
    parts = [_f16_bytes(d), _f16_bytes(dmin), _pack_scale_min(sc, mn).long()]
    if fmt == "q5_k":
        parts.append(_pack_bits(codes >> 4))
    parts.append(qs.flatten(-2))
    return torch.cat(parts, -1).to(torch.uint8).reshape(*lead, -1)


def _nonzero(t: torch.Tensor) -> torch.Tensor:
    t = t.float()
    return torch.where(t > 0, t, torch.ones_like(t))


def _f16_bytes(h: torch.Tensor) -> torch.Tensor:
    """float16 [...] -> its little-endian bytes as int64 [..., 2]."""
    return h.contiguous()[..., None].view(torch.uint8).long()


def _codes2(qs: torch.Tensor) -> torch.Tensor:
    """Q3_K's / Q2_K's 64 bytes of 2-bit fields [..., 64] -> the codes [..., 256] (int64) in column order:
    column 128n + 32j + l is bits 2j of byte 32n + l."""
    qs = qs.long().unflatten(-1, (2, 32))  # [..., n, l]
    return torch.stack([(qs >> (2 * j)) & 3 for j in range(4)], -2).flatten(-3)


def _q3k_scales(s: torch.Tensor) -> torch.Tensor:
    """Q3_K's 12 packed scale bytes [..., 12] -> the 16 6-bit scales (before the - 32), int64 [..., 16]: scale
    k's low 4 bits in nibble k // 8 of byte k % 8, its high 2 bits at bits 2 (k // 4) of byte 8 + k % 4."""
    s = s.long()
    lo = torch.cat([s[..., :8] & 15, s[..., :8] >> 4], -1)
    hi = torch.cat([(s[..., 8:12] >> (2 * i)) & 3 for i in range(4)], -1)
    return lo | (hi << 4)


def _pack_q3k_scales(sc: torch.Tensor) -> torch.Tensor:
    """Scales 0..63 [..., 16] -> [..., 12] int64 (inverse of ``_q3k_scales``)."""
    lo = (sc[..., :8] & 15) | ((sc[..., 8:] & 15) << 4)
    hi = sum(((sc[..., 4 * i : 4 * i + 4] >> 4) & 3) << (2 * i) for i in range(4))
    return torch.cat([lo, hi], -1)


def _pack_codes2(codes: torch.Tensor) -> torch.Tensor:
    """Codes 0..3 [..., 256] in column order -> their 64 bytes [..., 64] int64 (inverse of ``_codes2``)."""
    c = codes.unflatten(-1, (2, 4, 32))  # [..., n, j, l]
    return sum(c[..., j, :] << (2 * j) for j in range(4)).flatten(-2)


def _q6k_codes(b: torch.Tensor) -> torch.Tensor:
    """Q6_K's 128 low-nibble and 64 high-pair bytes [..., 192] -> their codes 0..63 [..., 256] int64 in column
    order (column 128n + 32m + l: nibble m // 2 of byte 64n + 32 (m % 2) + l, bits 2m of byte 128 + 32n + l)."""
    ql, qh = b[..., :128].long(), b[..., 128:192].long()
    parts = []
    for n in range(2):
        lo, hi = ql[..., 64 * n : 64 * n + 64], qh[..., 32 * n : 32 * n + 32]
        parts += [
            (lo[..., :32] & 15) | ((hi & 3) << 4),
            (lo[..., 32:] & 15) | (((hi >> 2) & 3) << 4),
            (lo[..., :32] >> 4) | (((hi >> 4) & 3) << 4),
            (lo[..., 32:] >> 4) | (((hi >> 6) & 3) << 4),
        ]
    return torch.cat(parts, -1)


def _pack_q6k_codes(codes: torch.Tensor) -> torch.Tensor:
    """Codes 0..63 [..., 256] in column order -> Q6_K's 192 code bytes [..., 192] int64 (inverse of
    ``_q6k_codes``)."""
    out = []
    for n in range(2):
        c = codes[..., 128 * n : 128 * n + 128]
        out.append((c[..., 0:32] & 15) | ((c[..., 64:96] & 15) << 4))
        out.append((c[..., 32:64] & 15) | ((c[..., 96:128] & 15) << 4))
    qh = [
        (c[..., 0:32] >> 4)
        | ((c[..., 32:64] >> 4) << 2)
        | ((c[..., 64:96] >> 4) << 4)
        | ((c[..., 96:128] >> 4) << 6)
        for c in (codes[..., :128], codes[..., 128:])
    ]
    return torch.cat([*out, *qh], -1)


def _q4k_codes(qs: torch.Tensor) -> torch.Tensor:
    """Q4_K's 128 nibble bytes [..., 128] -> their codes [..., 256] (same dtype) in column order."""
    qs = qs.unflatten(-1, (4, 32))
    return torch.stack([qs & 15, qs >> 4], -2).flatten(-3)


def _bits(qh: torch.Tensor) -> torch.Tensor:
    """32 bytes of single bits [..., 32] (Q5_K's fifth bits, Q3_K's high bits) -> the bits [..., 256] (int64) in
    column order: bit s of byte l belongs to column 32s + l."""
    qh = qh.long()
    return torch.stack([(qh >> s) & 1 for s in range(8)], -2).flatten(-2)


def _pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Inverse of ``_bits``: bits [..., 256] -> their 32 bytes [..., 32] (int64)."""
    b = bits.unflatten(-1, (8, 32))
    return sum(b[..., s, :] << s for s in range(8))


def _q3k_codes(b: torch.Tensor) -> torch.Tensor:
    """Q3_K's 96 code bytes (32 of high bits, 64 of 2-bit fields) [..., 96] -> the 3-bit codes (low + 4 high,
    0..7) [..., 256] int64 in column order."""
    return _codes2(b[..., 32:96]) | (_bits(b[..., :32]) << 2)


def _pack_q3k_codes(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of ``_q3k_codes``: codes [..., 256] -> (the 32 high-bit bytes, the 64 bytes of 2-bit fields)."""
    return _pack_bits(codes >> 2), _pack_codes2(codes & 3)


def _q5k_codes(b: torch.Tensor) -> torch.Tensor:
    """Q5_K's 160 code bytes (32 of fifth bits, 128 of nibbles) [..., 160] -> the codes [..., 256] (int64) in column
    order."""
    return _q4k_codes(b[..., 32:].long()) | (_bits(b[..., :32]) << 4)


def _pack_q5k_codes(codes: torch.Tensor) -> torch.Tensor:
    """Inverse of ``_q5k_codes``: codes [..., 256] -> the 160 bytes [..., 160] (int64)."""
    c4 = (codes & 15).unflatten(-1, (4, 2, 32))
    return torch.cat(
        [_pack_bits(codes >> 4), (c4[..., 0, :] | (c4[..., 1, :] << 4)).flatten(-2)], -1
    )


# The X16 tiles' planes of 16-bit words (``csrc/cpu/formats.h``): per group P of ne x no columns of a super-block,
# word w of row i at 64P + 4i + 2w; the field of column (ne no) P + no e + o at bit b + step e of word w, for each
# (o, w, b) of the plane's places. A nibble k of the codes' word h is column (0, 4, 1, 5)[k] + 2h of its 8.
# q6_k_x16's high 2 bits: groups of 16 columns (e < 2, o < 8, step 2), bit 4k + 4 (k < 3) or 0 (k = 3) of word h.
_X16_HIGH = [
    ((0, 4, 1, 5)[k] + 2 * h, h, 4 * k + 4 if k < 3 else 0) for h in range(2) for k in range(4)
]
# q5_k_x16's fifth bits: groups of 32 (e < 4, o < 8, step 1), bit 4k + 4 of word h (k < 3), bit 0 of word 1 - h (k = 3).
_X16_FIFTH = [
    ((0, 4, 1, 5)[k] + 2 * h, h if k < 3 else 1 - h, 4 * k + 4 if k < 3 else 0)
    for h in range(2)
    for k in range(4)
]
# q3_k_x16: code k (0..7) of word h is column 8 (k // 4) + (0, 4, 1, 5)[k % 4] + 2h of a sub-block of 16. Its low 2
# bits: groups of 16 (e < 1, o < 16), bits 2k of word h; its high bit: groups of 32 (e < 2, o < 16, step 1), bit
# 2k + 2 of word h (k < 7), bit 0 of word 1 - h (k = 7).
_Q3_COLUMN = [
    (h, k, 8 * (k // 4) + (0, 4, 1, 5)[k % 4] + 2 * h) for h in range(2) for k in range(8)
]
_X16_Q3_LOW = [(o, h, 2 * k) for h, k, o in _Q3_COLUMN]
_X16_Q3_HIGH = [(o, h if k < 7 else 1 - h, 2 * k + 2 if k < 7 else 0) for h, k, o in _Q3_COLUMN]


def _x16_words(fields: torch.Tensor, places, ne: int, no: int, step: int) -> torch.Tensor:
    """Fields [..., 16 rows, 256] (int64, each within its bits) -> a plane of words as bytes [..., 256 / (ne no) *
    64] (see the tables above)."""
    f = fields.unflatten(-1, (-1, ne, no))  # [.., i, P, e, o]
    words = torch.zeros(*f.shape[:-2], 2, dtype=torch.int64)  # [.., i, P, w]
    for o, w, bit in places:
        for e in range(ne):
            words[..., w] |= f[..., e, o] << (bit + step * e)
    return torch.stack([words & 255, words >> 8], -1).transpose(-4, -3).flatten(-4)


def _x16_fields(t: torch.Tensor, places, ne: int, no: int, step: int, width: int) -> torch.Tensor:
    """Inverse of ``_x16_words``: a plane's bytes [..., n] -> its fields of ``width`` bits [..., 16 rows, 256]."""
    b = t.long().unflatten(-1, (-1, 16, 2, 2)).transpose(-4, -3)  # [.., i, P, w, 2]
    words = b[..., 0] | (b[..., 1] << 8)
    f = torch.zeros(*words.shape[:-1], ne, no, dtype=torch.int64)  # [.., i, P, e, o]
    for o, w, bit in places:
        for e in range(ne):
            f[..., e, o] = (words[..., w] >> (bit + step * e)) & ((1 << width) - 1)
    return f.flatten(-3)


def _x16_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Codes [..., 16 rows, 256] -> their low nibbles as X16 tiles' first 2048 bytes [..., 2048]: byte 64p + 4i + b
    of row i, low nibble column 8p + b, high 8p + 4 + b."""
    c = (codes & 15).unflatten(-1, (32, 2, 4))  # [.., 16, 32 p, lo/hi, 4 b]
    return (c[..., 0, :] | (c[..., 1, :] << 4)).transpose(-3, -2).flatten(-3)


def _x16_codes(t: torch.Tensor) -> torch.Tensor:
    """Inverse of ``_x16_nibbles``: [..., 2048] -> low nibbles [..., 16 rows, 256] (int64)."""
    nib = t.long().unflatten(-1, (32, 16, 4)).transpose(-3, -2)  # [.., 16, 32 p, 4 b]
    return torch.stack([nib & 15, nib >> 4], -2).flatten(-3)


def to_x16(q: torch.Tensor, cols: int, fmt: str = "q4_k") -> torch.Tensor:
    """Q4_K, Q5_K, Q6_K or Q3_K (``fmt``) blocks ``q`` uint8 [..., rows, row bytes] (rows % 16 == 0; rows may be
    padded at the end) -> the same bytes as ``fmt + "_x16"`` (``csrc/cpu/formats.h``): per 16 rows and
    super-block one tile of 16 blocks' bytes -- the codes' low nibbles, 16 x 4 bytes per 8 columns (low nibble
    column 8p + b, high 8p + 4 + b), q5_k's fifth bits or q6_k's high 2 bits in 16-bit words (q3_k: its low 2
    bits and high bits in words), the scale bytes as byte planes over the rows, then the rows' f16 d (and dmin)
    -- the tiles of all groups back to back, any row padding (zeros) after them. A new tensor of ``q``'s shape."""
    *lead, rows, rb = q.shape
    nsb, bb = cols // QK, BLOCK_BYTES.get(fmt, 0)
    if fmt not in ("q4_k", "q5_k", "q6_k", "q3_k") or rows % 16 or cols % QK or rb < nsb * bb:
        raise ValueError(
            f"{fmt}_x16 needs q4_k, q5_k, q6_k or q3_k with rows % 16 == 0 and whole super-blocks, got "
            f"[{rows}, {cols}] in {rb} B rows"
        )
    # [.., G, nsb, 16, bb]
    b = q[..., : nsb * bb].reshape(*lead, rows // 16, 16, nsb, bb).transpose(-3, -2)
    if fmt == "q3_k":
        codes = _q3k_codes(b[..., :96])
        parts = [
            _x16_words(codes & 3, _X16_Q3_LOW, 1, 16, 0),
            _x16_words(codes >> 2, _X16_Q3_HIGH, 2, 16, 1),
            b[..., 96:108].transpose(-2, -1).flatten(-2),  # byte plane k over the rows
            b[..., 108:110].flatten(-2),
        ]
    elif fmt in ("q4_k", "q5_k"):
        codes = _q5k_codes(b[..., 16:]) if fmt == "q5_k" else _q4k_codes(b[..., 16:])
        parts = [
            _x16_nibbles(codes),
            *([_x16_words(codes >> 4, _X16_FIFTH, 4, 8, 1)] if fmt == "q5_k" else []),
            b[..., 4:16].transpose(-2, -1).flatten(-2),  # byte plane k over the rows
            b[..., 0:2].flatten(-2),
            b[..., 2:4].flatten(-2),
        ]
    else:
        codes = _q6k_codes(b[..., :192])
        parts = [
            _x16_nibbles(codes),
            _x16_words(codes >> 4, _X16_HIGH, 2, 8, 2),
            b[..., 192:208].transpose(-2, -1).flatten(-2),
            b[..., 208:210].flatten(-2),
        ]
    tile = torch.cat([t.to(torch.uint8) for t in parts], -1)  # [.., G, nsb, 16 bb]
    out = torch.zeros_like(q).reshape(*lead, rows * rb)
    out[..., : rows * nsb * bb] = tile.flatten(-3)
    return out.reshape(q.shape)


def from_x16(q: torch.Tensor, cols: int, fmt: str = "q4_k") -> torch.Tensor:
    """The inverse of ``to_x16``: ``fmt + "_x16"`` bytes [..., rows, row bytes] -> ``fmt`` blocks of the same
    shape."""
    *lead, rows, rb = q.shape
    nsb, bb = cols // QK, BLOCK_BYTES[fmt]
    t = q.reshape(*lead, rows * rb)[..., : rows * nsb * bb].unflatten(
        -1, (rows // 16, nsb, 16 * bb)
    )
    if fmt == "q3_k":
        low = _x16_fields(
            t[..., :1024], _X16_Q3_LOW, 1, 16, 0, 2
        )  # [.., G, nsb, 16, 256] column order
        codes = low | (_x16_fields(t[..., 1024:1536], _X16_Q3_HIGH, 2, 16, 1, 1) << 2)
        parts = [
            *_pack_q3k_codes(codes),
            t[..., 1536:1728].unflatten(-1, (12, 16)).transpose(-2, -1),
            t[..., 1728:1760].unflatten(-1, (16, 2)),
        ]
    elif fmt in ("q4_k", "q5_k"):
        codes = _x16_codes(t[..., :2048])  # [.., G, nsb, 16, 256] column order
        if fmt == "q5_k":
            qs = _pack_q5k_codes(
                codes | (_x16_fields(t[..., 2048:2560], _X16_FIFTH, 4, 8, 1, 1) << 4)
            )
        else:
            c = codes.unflatten(-1, (4, 2, 32))  # column 64m + 32h + l
            qs = (c[..., 0, :] | (c[..., 1, :] << 4)).flatten(-2)
        sc = 2560 if fmt == "q5_k" else 2048  # the scale planes, then d, dmin
        parts = [
            t[..., sc + 192 : sc + 224].unflatten(-1, (16, 2)),
            t[..., sc + 224 : sc + 256].unflatten(-1, (16, 2)),
            t[..., sc : sc + 192].unflatten(-1, (12, 16)).transpose(-2, -1),
            qs,
        ]
    else:
        codes = _x16_codes(t[..., :2048]) | (
            _x16_fields(t[..., 2048:3072], _X16_HIGH, 2, 8, 2, 2) << 4
        )
        parts = [
            _pack_q6k_codes(codes),
            t[..., 3072:3328].unflatten(-1, (16, 16)).transpose(-2, -1),
            t[..., 3328:3360].unflatten(-1, (16, 2)),
        ]
    blk = torch.cat([p.to(torch.uint8) for p in parts], -1)  # [.., G, nsb, 16, bb]
    out = torch.zeros_like(q)
    out[..., : nsb * bb] = blk.transpose(-3, -2).reshape(*lead, rows, nsb * bb)
    return out
