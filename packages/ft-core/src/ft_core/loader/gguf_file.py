"""A GGUF model file as llama.cpp writes it (parsed by ``gguf_parse``: what llama.cpp's own ``gguf``
reader gives, faster): metadata by key and tensors by GGUF name, across the parts of a split model
(``NAME-00001-of-0000N.gguf``). Tensor data stays memory-mapped until a caller converts it.

Errors name the file and the key or tensor: a truncated or corrupt file, a missing part, a missing
metadata key, a tensor of an unexpected shape.
"""

from __future__ import annotations

import mmap
import re
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ft_core.errors import CheckpointError
from ft_core.loader.gguf_parse import ParsedGGUF

STORED = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}  # kept as they are
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")
_MISSING = object()
DEQUANT_BYTES = 32 << 20  # float32 values dequantised at a time (GGUFTensor.values)


def split_parts(path: Path) -> list[Path]:
    """Every part of the model ``path`` belongs to (itself when not split), in order."""
    m = _SPLIT.match(path.name)
    if not m:
        return [path]
    n = int(m["n"])
    parts = [path.with_name(f"{m['stem']}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise CheckpointError(
            f"{path}: split model of {n} parts, missing {', '.join(missing)} beside it"
        )
    return parts


def _open(path: Path) -> ParsedGGUF:
    try:
        return ParsedGGUF(str(path))
    except (ValueError, IndexError, OSError, KeyError, TypeError, struct.error) as e:
        raise CheckpointError(
            f"{path}: not a readable GGUF file ({type(e).__name__}: {e}); the file may be "
            "truncated or corrupt: download or convert it again"
        ) from e


class GGUFTensor:
    """One tensor: GGML type, shape in torch order (outermost first), the raw bytes or values."""

    def __init__(self, t, file: Path, mm=None):
        self.name: str = t.name
        self.type = t.tensor_type  # gguf.GGMLQuantizationType
        self.shape: tuple[int, ...] = tuple(int(x) for x in reversed(t.shape.tolist()))
        self.data: np.ndarray = t.data  # memory-mapped (quantised types: uint8 blocks per row)
        self.file = file
        self._mm, self._span = mm, (int(t.data_offset), int(t.n_bytes))

    @property
    def type_name(self) -> str:
        return self.type.name

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype ``to_torch`` gives: the stored float type, float32 for quantised types."""
        return STORED.get(self.type_name, torch.float32)

    def release(self, outer: slice = slice(None)) -> None:
        """Drop this tensor's pages of the file mapping (those of ``outer`` along the first dimension,
        default all) from the process (MADV_DONTNEED: they stay in the page cache) once a copy of them
        exists, so that loading does not hold the file and its copy in memory at once (the whole-file
        mapping would otherwise stay resident until closed). Pages shared with a neighbour go too:
        they are read back from the page cache if touched again."""
        if self._mm is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        off, n = self._span
        if outer != slice(None):
            lo, hi, _ = outer.indices(self.shape[0])
            per = n // self.shape[0]
            off, n = off + lo * per, (hi - lo) * per
        start = off // mmap.PAGESIZE * mmap.PAGESIZE
        try:
            self._mm.madvise(mmap.MADV_DONTNEED, start, off + n - start)
        except (OSError, ValueError):
            pass  # advice only

    def to_torch(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The values in torch order, a copy: as stored for F32 / F16 / BF16; other types dequantised
        into ``dtype`` (default float32) as ``values`` does. The file's pages of the tensor are released
        after the copy."""
        out = self.values(slice(None), dtype)
        if self.type_name in STORED:
            out = out.clone()
        self.release()
        return out

    def values(self, outer: slice, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Values of ``outer`` along the first dimension, in torch order. F32 / F16 / BF16: a read-only
        view of the mapping (valid until ``release``; copy it). Other types: dequantised by llama.cpp's
        ``gguf.quants.dequantize`` into a new tensor of ``dtype`` (default float32), DEQUANT_BYTES of
        float32 values at a time, so that a large tensor (an LM head) never exists whole in float32
        beside its numpy temporaries; CheckpointError names a type it cannot read."""
        a = np.asarray(self.data)[outer]
        shape = (a.shape[0], *self.shape[1:]) if len(self.shape) > 1 else (a.shape[0],)
        if self.type_name not in STORED:
            return self._dequantize(a, shape, dtype or torch.float32)
        raw = a.view(np.int16) if self.type_name == "BF16" else a
        with warnings.catch_warnings():  # a read-only mapping: the caller only reads it
            warnings.simplefilter("ignore", UserWarning)
            out = torch.from_numpy(raw).reshape(shape)
        return out.view(torch.bfloat16) if self.type_name == "BF16" else out

    def _dequantize(
        self, a: np.ndarray, shape: tuple[int, ...], dtype: torch.dtype
    ) -> torch.Tensor:
        import gguf

        cols = shape[-1]
        out = torch.empty(shape, dtype=dtype)
        src, dst = a.reshape(-1, a.shape[-1]), out.view(-1, cols)  # rows of blocks, rows of values
        step = max(1, DEQUANT_BYTES // (4 * cols))
        for r in range(0, dst.shape[0], step):
            try:
                vals = gguf.quants.dequantize(src[r : r + step], self.type)
            except NotImplementedError as e:
                raise CheckpointError(
                    f"{self.file}: tensor {self.name!r} has GGML type {self.type_name}, which ft "
                    "cannot read; requantize the model with llama-quantize (e.g. to Q8_0 or Q4_K)"
                ) from e
            dst[r : r + step] = torch.from_numpy(np.ascontiguousarray(vals, dtype=np.float32))
        return out


class GGUFFile:
    """Metadata (from the first part) and tensors (from every part) of one GGUF model."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise CheckpointError(f"{self.path}: no such GGUF file")
        self.parts = split_parts(self.path)
        readers = [_open(p) for p in self.parts]
        self._fields = readers[0].fields
        self.tensors: dict[str, GGUFTensor] = {}
        for p, r in zip(self.parts, readers):
            mm = getattr(r.data, "_mmap", None)  # numpy's memmap keeps its mmap object there
            for t in r.tensors:
                self.tensors[t.name] = GGUFTensor(t, p, mm)
        self._readers = readers  # keep the memory maps alive
        self.arch = str(self.get("general.architecture"))

    def has(self, key: str) -> bool:
        return key in self._fields

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """The value of metadata ``key`` (str, number, bool or list); CheckpointError when missing
        and no ``default`` is given."""
        if key not in self._fields:
            if default is _MISSING:
                raise CheckpointError(f"{self.path}: metadata key {key!r} is missing")
            return default
        value = self._fields[key]
        if isinstance(value, UnicodeDecodeError):
            raise CheckpointError(f"{self.path}: metadata key {key!r} is unreadable ({value})")
        return value

    def release(self, *keys: str) -> None:
        """Forget metadata fields once read (a 150k-token vocabulary with its merges is ~30 MB of
        Python strings, otherwise kept for the life of the file)."""
        for k in keys:
            self._fields.pop(k, None)

    def arch_get(self, key: str, default: Any = _MISSING) -> Any:
        """``{general.architecture}.{key}``, e.g. ``block_count``."""
        return self.get(f"{self.arch}.{key}", default)

    def tensor(self, name: str) -> GGUFTensor:
        t = self.tensors.get(name)
        if t is None:
            raise CheckpointError(f"{self.path}: tensor {name!r} is missing")
        return t

    def close(self) -> None:
        self._readers = []
        self.tensors = {}
