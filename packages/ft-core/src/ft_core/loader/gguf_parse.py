"""A GGUF file's header, metadata and tensor table, parsed in one pass over the memory-mapped bytes
(GGUF v2 / v3, little-endian, as llama.cpp writes them). llama.cpp's own reader (``gguf.GGUFReader``)
builds numpy views for every element of every array: 2 s for a 50k-token vocabulary, ~6 s for
Qwen's 151k tokens and merges, before a model loads. This reads the same fields into Python values
(strings decoded; arrays as lists) in a small fraction of that, and hands out each tensor's data as
the same memory-mapped numpy view the ``gguf`` reader gives (``tests/test_gguf_parse.py`` checks
both against it). Raises ValueError on a malformed or truncated file (``gguf_file`` names the file).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

MAGIC = b"GGUF"
VERSIONS = (2, 3)
# GGUF value types (gguf.GGUFValueType): struct format of the scalars
_SCALAR = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9
_NP = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
       6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}  # fmt: skip


@dataclass
class ParsedTensor:
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: np.ndarray  # GGML order (innermost first), as gguf.ReaderTensor.shape
    n_bytes: int
    data_offset: int
    data: np.ndarray  # a view of the mapping: float types as values, others uint8 [..., row bytes]


class ParsedGGUF:
    """``fields`` (key -> Python value; a value that is not valid UTF-8 as the UnicodeDecodeError
    it raised), ``tensors`` (in file order), ``data`` (the file as a read-only np.memmap)."""

    def __init__(self, path: str):
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import quant_shape_to_byte_shape

        self.data = np.memmap(path, mode="r")
        buf = memoryview(self.data)
        self._buf, self._off = buf, 0
        if bytes(buf[:4]) != MAGIC:
            raise ValueError("GGUF magic invalid")
        self._off = 4
        version = self._scalar("I")
        if version & 0xFFFF == 0:
            raise ValueError("the file is big-endian (only little-endian GGUF files are read)")
        if version not in VERSIONS:
            raise ValueError(f"GGUF version {version} is not one of {VERSIONS}")
        n_tensors, n_kv = self._scalar("Q"), self._scalar("Q")
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._str()
            if key in self.fields:
                raise ValueError(f"metadata key {key!r} appears twice")
            self.fields[key] = self._value(self._scalar("I"))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            dims = [self._scalar("Q") for _ in range(self._scalar("I"))]
            infos.append((name, dims, self._scalar("I"), self._scalar("Q")))
        align = self.fields.get("general.alignment", 32)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise ValueError(f"invalid general.alignment {align!r}")
        start = -(-self._off // align) * align
        self.tensors: list[ParsedTensor] = []
        names = set()
        floats = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8,
                  "I16": np.int16, "I32": np.int32, "I64": np.int64}  # fmt: skip
        for name, dims, raw_type, rel in infos:
            if name in names:
                raise ValueError(f"tensor {name!r} appears twice")
            names.add(name)
            ty = GGMLQuantizationType(raw_type)
            n = int(np.prod(dims, dtype=np.int64)) if dims else 1
            block, size = GGML_QUANT_SIZES[ty]
            n_bytes = n * size // block
            off = start + rel
            if off + n_bytes > len(self.data):
                raise ValueError(
                    f"tensor {name!r} ends at byte {off + n_bytes}, past the file's end "
                    f"({len(self.data)} bytes): the file is truncated"
                )
            np_dims = tuple(reversed(dims))
            if ty.name in floats:
                view = self.data[off : off + n_bytes].view(floats[ty.name]).reshape(np_dims)
            else:
                byte_dims = quant_shape_to_byte_shape(np_dims, ty)
                view = self.data[off : off + n_bytes].reshape(byte_dims)
            shape = np.array(dims, dtype=np.uint64)
            self.tensors.append(ParsedTensor(name, ty, shape, n_bytes, off, view))
        del self._buf

    def _take(self, n: int) -> memoryview:
        end = self._off + n
        if end > len(self._buf):
            raise ValueError(f"the header ends at byte {len(self._buf)}: the file is truncated")
        out = self._buf[self._off : end]
        self._off = end
        return out

    def _scalar(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack_from("<" + fmt, self._take(size))[0]

    def _str(self) -> str:
        return str(self._take(self._scalar("Q")), "utf-8")

    def _value(self, vtype: int):
        if vtype in _SCALAR:
            return self._scalar(_SCALAR[vtype])
        if vtype == _STRING:
            raw = bytes(self._take(self._scalar("Q")))
            return _decode(raw)
        if vtype != _ARRAY:
            raise ValueError(f"unknown metadata value type {vtype}")
        itype, n = self._scalar("I"), self._scalar("Q")
        if itype in _NP:  # numbers: one view, converted at once
            dt = np.dtype(_NP[itype]).newbyteorder("<")
            return np.frombuffer(self._take(n * dt.itemsize), dtype=dt).tolist()
        if itype == _STRING:
            return self._strings(n)
        return [self._value(itype) for _ in range(n)]

    def _strings(self, n: int) -> list:
        buf, off, out = self._buf, self._off, []
        unpack, end = struct.Struct("<Q").unpack_from, len(buf)
        for _ in range(n):
            if off + 8 > end:
                raise ValueError(f"the header ends at byte {end}: the file is truncated")
            k = unpack(buf, off)[0]
            off += 8
            if off + k > end:
                raise ValueError(f"the header ends at byte {end}: the file is truncated")
            out.append(bytes(buf[off : off + k]))
            off += k
        self._off = off
        try:
            return [b.decode("utf-8") for b in out]
        except UnicodeDecodeError as e:
            return e


def _decode(raw: bytes):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e
