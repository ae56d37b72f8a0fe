"""Index of the tensors in a checkpoint directory (single or sharded safetensors).

Headers are parsed and checked here (JSON, dtypes, offsets, file length) so that a truncated or
corrupt file is named in a clear error before any tensor is read. Tensors are read with ``pread``
into memory of their own (``get``) or straight into a preallocated destination such as a slice of an
expert bank (``read_into``, on a thread pool). No memory map: a tensor handed out by a map keeps the
whole shard mapped, and every page another tensor's copy touched stays resident beside its copy
(peak RSS ~2x the checkpoint). Page-cache pages of the reads are the kernel's to drop, not the
process's RSS.

Threads of ``read_into``: ``FT_LOAD_THREADS`` (default 8, as FTW loading).
"""

from __future__ import annotations

import json
import math
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from ft_core import env
from ft_core.errors import CheckpointError
from ft_core.loader.tensor_index import TensorIndex

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
_SIZES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


_CHUNK = 16 << 20  # bytes of one read job of ``read_into``


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int = 0  # of the first byte in the file
    nbytes: int = 0


def _read_header(path: Path) -> dict[str, TensorInfo]:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes, no header)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise CheckpointError(
                f"{path}: truncated or corrupt safetensors file (header of {n} bytes, file {size})"
            )
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from e
    data_len = size - 8 - n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = meta.get("dtype")
        if dt not in _DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {dt!r}")
        shape = tuple(int(s) for s in meta["shape"])
        begin, end = meta["data_offsets"]
        if end - begin != math.prod(shape) * _SIZES[dt]:
            raise CheckpointError(
                f"{path}: tensor {name!r} byte range does not match its shape {list(shape)}"
            )
        if end > data_len:
            raise CheckpointError(
                f"{path}: truncated safetensors file: tensor {name!r} ends at byte {end} of the data section, "
                f"but the file holds only {data_len} bytes of data"
            )
        out[name] = TensorInfo(path, _DTYPES[dt], shape, 8 + n + begin, end - begin)
    return out


class SafetensorsIndex(TensorIndex):
    """Name -> (file, dtype, shape) over every ``*.safetensors`` file of a checkpoint directory (the
    ``TensorIndex`` of Hugging Face checkpoints; reads on demand)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        index_file = self.dir / "model.safetensors.index.json"
        if index_file.is_file():
            try:
                weight_map = json.loads(index_file.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as e:
                raise CheckpointError(f"{index_file}: invalid index ({e})") from e
            files = sorted({self.dir / f for f in weight_map.values()})
            for f in files:
                if not f.is_file():
                    raise CheckpointError(f"{f}: shard listed in {index_file.name} is missing")
        else:
            files = sorted(self.dir.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{self.dir}: no *.safetensors weight files")
        self.tensors: dict[str, TensorInfo] = {}
        for f in files:
            self.tensors.update(_read_header(f))
        self._fds: dict[Path, int] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    def info(self, name: str, shape: tuple[int, ...] | None = None) -> TensorInfo:
        """The tensor's record; CheckpointError naming it when missing or not of ``shape`` (when given)."""
        info = self.tensors.get(name)
        if info is None:
            raise CheckpointError(f"{self.dir}: tensor {name!r} is missing from the checkpoint")
        if shape is not None and tuple(shape) != info.shape:
            raise CheckpointError(
                f"{info.file}: tensor {name!r} has shape {list(info.shape)}, expected {list(shape)} from config.json"
            )
        return info

    def dtype(self, name: str) -> torch.dtype:
        return self.info(name).dtype

    def file_of(self, name: str) -> Path:
        return self.info(name).file

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Read one tensor (a fresh CPU tensor in its stored dtype); check ``shape`` when given."""
        info = self.info(name, shape)
        out = torch.empty(info.shape, dtype=info.dtype)
        _pread(self._fd(info.file), info, name, _bytes(out), 0, info.nbytes)
        return out

    def read_into(self, jobs: list[tuple[str, torch.Tensor]], threads: int | None = None) -> None:
        """Read each tensor ``name`` into ``dest`` (mutated; its shape must be the stored one) for every
        ``(name, dest)`` of ``jobs``, in file order on a thread pool. A contiguous ``dest`` of the stored
        dtype is read into directly; any other is filled through a temporary of the stored tensor."""
        chunks = []  # (fd, info, name, dest bytes, lo, hi): bytes [lo, hi) of one tensor
        for name, dest in jobs:
            info = self.info(name, tuple(dest.shape))
            if dest.is_contiguous() and dest.dtype == info.dtype:
                fd, buf = self._fd(info.file), _bytes(dest)
                chunks += [
                    (fd, info, name, buf, lo, min(info.nbytes, lo + _CHUNK))
                    for lo in range(0, info.nbytes, _CHUNK)
                ]
            else:
                dest.copy_(self.get(name))
        chunks.sort(key=lambda c: (c[1].file, c[1].offset + c[4]))
        threads = threads or env.integer("FT_LOAD_THREADS")
        if threads <= 1 or len(chunks) <= 1:
            for c in chunks:
                _pread(*c)
            return
        pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="st-read")
        try:
            for f in [pool.submit(_pread, *c) for c in chunks]:
                f.result()  # the first error is raised; the reads not yet started are cancelled
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _pread(fd: int, info: TensorInfo, name: str, buf: memoryview, lo: int, hi: int) -> None:
    """Bytes ``[lo, hi)`` of the tensor into ``buf[lo:hi]`` (the tensor's bytes; mutated)."""
    done = lo
    while done < hi:
        n = os.preadv(fd, [buf[done:hi]], info.offset + done)
        if n == 0:
            raise CheckpointError(
                f"{info.file}: truncated while reading tensor {name!r} (the file ends before "
                f"byte {info.offset + hi}; was it changed during loading?)"
            )
        done += n


def _bytes(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous tensor's data (no copy)."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())
