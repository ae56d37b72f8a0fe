"""The FTW checkpoint format: the engine's runtime layout on disk, for loading at disk speed.

An FTW directory holds ``config.json``, ``generation_config.json`` and the tokenizer files of the
source checkpoint, shards ``model-00001.ftw`` … of bounded size, and ``ftw_index.json`` (written
last, so a directory without it is never taken for a finished conversion)::

    {"format": "ftw", "version": 1, "alignment": 4096,
     "checksum": {"algorithm": "blocksum64", "chunk_bytes": 16777216},
     "bank": {"fmt": "bf16", "num_experts": E, "hidden": H, "inter": I, "act": "swiglu",
              "num_ids": N, "fp8_block": 0, "global_scale": [1.0, 1.0], "tensors": ["w13", "w2"]} | null,
     "shards": [{"file": "model-00001.ftw", "bytes": 123}],
     "tensors": [{"name": "model.embed_tokens.weight", "kind": "dense", "shape": [V, H], "dtype": "BF16",
                  "file": "model-00001.ftw", "offset": 0, "bytes": 2*V*H, "checksum": [c0, c1, ...]},
                 {"name": "experts.w13", "kind": "bank", "rows": [a, b], "shape": [b - a, 2I, H], ...}]}

``bank.fmt`` is an ExpertBank format (``experts/bank.py``: the kernels' names, or ``f32``); indexes written
before those names say ``dense`` or ``fp8`` and are still read. Dense tensors keep their checkpoint names, dtypes and values (fp8 weights with their
``weight_scale_inv``): the engine's ``WeightReader`` treats them as it treats safetensors. Bank
entries hold rows ``[a, b)`` (flat ids) of one ``ExpertBank`` tensor in the kernels' layout
(``experts/bank.py``). Every tensor starts at a multiple of ``alignment`` in its shard, so it can be
read with direct IO; ``checksum`` has one value per ``chunk_bytes`` of the tensor's bytes.

The checksum (``blocksum64``) is built to be verified at disk speed on a small CPU: per 4 KiB block
the wrap-around sum of its little-endian uint64 words, combined as ``sum_b (2b + 1) * s_b`` plus the
tail words and the length, mod 2^64 (numpy, ~10 GB/s a core, GIL released; CRC-32 runs at ~4 GB/s
and would cost a 2-core machine a third of its load time). It catches flipped bits, zeroed, garbage
or missing blocks, truncation and misplaced 4 KiB blocks; not errors that cancel within one block.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ft_core.errors import CheckpointError
from ft_core.loader.safetensors_index import _DTYPES as DTYPES
from ft_core.loader.safetensors_index import _SIZES as DTYPE_SIZES

VERSION = 1
ALIGN = 4096
CHUNK = 16 << 20  # checksum and read granularity, a multiple of ALIGN
INDEX_NAME = "ftw_index.json"
SHARD_SUFFIX = ".ftw"
# A dense tensor's GGUF bits kept beside its float values (FTW written from a GGUF): NAME + this + the
# GGML type in lower case (e.g. "lm_head.weight.ggml_q6_k"), uint8 [rows, row bytes]
NATIVE_SUFFIX = ".ggml_"
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}  # torch dtype -> safetensors name


def checksum(buf) -> int:
    """``blocksum64`` of a bytes-like object (see the module docstring); an int in [0, 2^64)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    n8 = len(a) // 8
    w = a[: n8 * 8].view("<u8")
    nb = n8 // 512
    sums = np.add.reduce(w[: nb * 512].reshape(nb, 512), axis=1)  # [nb] uint64, wraps
    h = int((sums * np.arange(1, 2 * nb + 1, 2, dtype=np.uint64)).sum(dtype=np.uint64)) if nb else 0
    rest = int(np.add.reduce(w[nb * 512 :], dtype=np.uint64)) + int.from_bytes(
        a[n8 * 8 :].tobytes(), "little"
    )
    return (h + (2 * nb + 1) * rest + len(a) * 0x9E3779B97F4A7C15) % (1 << 64)


def align_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class Entry:
    """One stored tensor (dense) or one row range of a bank tensor (bank)."""

    name: str
    kind: str  # "dense" | "bank"
    shape: tuple[int, ...]
    dtype: str  # safetensors dtype name
    file: str
    offset: int
    nbytes: int
    checksum: tuple[int, ...]
    rows: tuple[int, int] | None = None  # bank: flat ids [a, b)

    def to_json(self) -> dict:
        d = {
            "name": self.name,
            "kind": self.kind,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "file": self.file,
            "offset": self.offset,
            "bytes": self.nbytes,
            "checksum": list(self.checksum),
        }
        if self.rows is not None:
            d["rows"] = list(self.rows)
        return d


@dataclass(frozen=True)
class FTWIndex:
    root: Path
    entries: tuple[Entry, ...]
    bank: dict | None
    shards: dict[str, int]  # file -> bytes
    chunk: int

    @property
    def path(self) -> Path:
        return self.root / INDEX_NAME

    def to_json(self) -> dict:
        return {
            "format": "ftw",
            "version": VERSION,
            "alignment": ALIGN,
            "checksum": {"algorithm": "blocksum64", "chunk_bytes": self.chunk},
            "bank": self.bank,
            "shards": [{"file": f, "bytes": n} for f, n in self.shards.items()],
            "tensors": [e.to_json() for e in self.entries],
        }

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries)


def is_ftw_dir(root: Path) -> bool:
    """True for an FTW directory; CheckpointError for FTW shards without an index (an interrupted convert)."""
    if (root / INDEX_NAME).is_file():
        return True
    if any(root.glob(f"*{SHARD_SUFFIX}")):
        raise CheckpointError(
            f"{root / INDEX_NAME}: missing FTW index (the directory holds FTW shards but no index: "
            f"an interrupted `ft convert`? convert again)"
        )
    return False


def read_index(root: Path) -> FTWIndex:
    """Parse and check ``ftw_index.json``: version, fields, byte counts, shard files and their sizes.

    Raises CheckpointError naming the file (and tensor) at fault. Reads no tensor data."""
    path = root / INDEX_NAME
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing FTW index") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: corrupt FTW index ({e})") from e
    if not isinstance(raw, dict) or raw.get("format") != "ftw":
        raise CheckpointError(f'{path}: not an FTW index (no "format": "ftw")')
    if raw.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: FTW version {raw.get('version')!r} is not supported (this ft reads version "
            f"{VERSION}); convert the model again with `ft convert`"
        )
    try:
        chunk = int(raw["checksum"]["chunk_bytes"])
        algo = raw["checksum"]["algorithm"]
        if algo != "blocksum64":
            raise ValueError(
                f"checksum algorithm {algo!r} is not supported (blocksum64); convert the model again"
            )
        if chunk <= 0 or chunk % ALIGN or raw["alignment"] != ALIGN:
            raise ValueError(
                f"alignment {raw['alignment']} / chunk {chunk} is not {ALIGN} / a multiple of it"
            )
        shards = {s["file"]: int(s["bytes"]) for s in raw["shards"]}
        entries = tuple(_entry(t) for t in raw["tensors"])
        bank = raw["bank"]
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: invalid FTW index ({type(e).__name__}: {e})") from e
    for e in entries:
        _check_entry(path, e, shards, chunk)
    _check_shard_sizes(root, entries, shards)
    return FTWIndex(root, entries, bank, shards, chunk)


def _entry(t: dict) -> Entry:
    rows = tuple(int(x) for x in t["rows"]) if t.get("rows") is not None else None
    return Entry(
        str(t["name"]),
        str(t["kind"]),
        tuple(int(s) for s in t["shape"]),
        str(t["dtype"]),
        str(t["file"]),
        int(t["offset"]),
        int(t["bytes"]),
        tuple(int(c) for c in t["checksum"]),
        rows,
    )


def _check_entry(path: Path, e: Entry, shards: dict[str, int], chunk: int) -> None:
    where = f"{path}: tensor {e.name!r}" + (f" rows {list(e.rows)}" if e.rows else "")
    if e.kind not in ("dense", "bank") or (e.kind == "bank") != (e.rows is not None):
        raise CheckpointError(f"{where}: invalid kind {e.kind!r}")
    if e.dtype not in DTYPES:
        raise CheckpointError(f"{where}: unsupported dtype {e.dtype!r}")
    if e.nbytes != math.prod(e.shape) * DTYPE_SIZES[e.dtype]:
        raise CheckpointError(
            f"{where}: {e.nbytes} bytes do not match shape {list(e.shape)} {e.dtype}"
        )
    if e.file not in shards:
        raise CheckpointError(f"{where}: shard {e.file!r} is not listed in the index")
    if e.offset % ALIGN or e.offset + e.nbytes > shards[e.file]:
        raise CheckpointError(
            f"{where}: bytes {e.offset}..{e.offset + e.nbytes} are not an aligned range of "
            f"{e.file} ({shards[e.file]} bytes)"
        )
    if len(e.checksum) != -(-e.nbytes // chunk):
        raise CheckpointError(f"{where}: {len(e.checksum)} checksums for {e.nbytes} bytes")


def _check_shard_sizes(root: Path, entries: tuple[Entry, ...], shards: dict[str, int]) -> None:
    """Every shard exists and holds the bytes of every tensor placed in it (truncation is named)."""
    for name, want in shards.items():
        f = root / name
        if not f.is_file():
            raise CheckpointError(f"{f}: FTW shard listed in {INDEX_NAME} is missing")
        size = f.stat().st_size
        if size < want:
            cut = [e for e in entries if e.file == name and e.offset + e.nbytes > size]
            first = min(cut, key=lambda e: e.offset) if cut else None
            what = (
                f": tensor {first.name!r} needs bytes {first.offset}..{first.offset + first.nbytes}"
                if first
                else ""
            )
            raise CheckpointError(
                f"{f}: truncated FTW shard ({size} bytes, the index says {want}){what}; "
                f"convert the model again"
            )
