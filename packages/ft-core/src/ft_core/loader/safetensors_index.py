"""Index of the tensors in a checkpoint directory (single or sharded safetensors).

Headers are parsed and checked here (JSON, dtypes, offsets, file length) so that a truncated or
corrupt file is named in a clear error before any tensor is read. Tensors are then read one at a
time from a memory map, so loading never holds a second full copy of the checkpoint.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from ft_core.errors import CheckpointError

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
          "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]


def _read_header(path: Path) -> dict[str, TensorInfo]:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes, no header)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise CheckpointError(f"{path}: truncated or corrupt safetensors file (header of {n} bytes, file {size})")
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
            raise CheckpointError(f"{path}: tensor {name!r} byte range does not match its shape {list(shape)}")
        if end > data_len:
            raise CheckpointError(
                f"{path}: truncated safetensors file: tensor {name!r} ends at byte {end} of the data section, "
                f"but the file holds only {data_len} bytes of data"
            )
        out[name] = TensorInfo(path, _DTYPES[dt], shape)
    return out


class SafetensorsIndex:
    """Name -> (file, dtype, shape) over every ``*.safetensors`` file of a checkpoint directory."""

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
        self._handles: dict[Path, object] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Read one tensor (a fresh CPU tensor in its stored dtype); check ``shape`` when given."""
        info = self.tensors.get(name)
        if info is None:
            raise CheckpointError(f"{self.dir}: tensor {name!r} is missing from the checkpoint")
        if shape is not None and tuple(shape) != info.shape:
            raise CheckpointError(
                f"{info.file}: tensor {name!r} has shape {list(info.shape)}, expected {list(shape)} from config.json"
            )
        handle = self._handles.get(info.file)
        if handle is None:
            handle = self._handles[info.file] = safe_open(str(info.file), framework="pt")
        return handle.get_tensor(name)

    def close(self) -> None:
        self._handles.clear()
