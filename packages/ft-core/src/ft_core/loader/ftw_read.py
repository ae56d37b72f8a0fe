"""Load an FTW directory: every tensor read in parallel straight into its final host tensor.

``open_ftw`` checks the index (sizes always), preallocates the merged expert banks and the dense
tensors (``ALIGN``-aligned), reads every chunk on a thread pool (direct IO where possible, checksum
checked in the reading thread), pins the banks when CUDA is present (after filling), logs the
achieved GB/s and returns a ``WeightReader`` that the ``Decoder`` reads as it reads safetensors,
except that its ``expert_bank`` hands over the pre-built bank.

Threads: ``FT_LOAD_THREADS`` (default 8; reads mostly wait on the disk). ``FT_LOAD_HUGEPAGES=1``: fill
transparent huge pages (faster where memory is not returned to a hypervisor; ``ftw_io.aligned_empty``).
Legend: N = flat expert ids.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

import torch

from ft_core import env
from ft_core.errors import CheckpointError
from ft_core.experts.bank import ExpertBank, bank_format
from ft_core.loader.ftw_format import DTYPES, NATIVE_SUFFIX, Entry, FTWIndex, read_index
from ft_core.loader.gguf_experts import DENSE_TYPES
from ft_core.loader.ftw_io import ShardFiles, aligned_empty, byte_view, pin_in_place, read_chunk
from ft_core.loader.progress import Progress
from ft_core.loader.tensor_index import TensorIndex
from ft_core.loader.weights import WeightReader
from ft_core.model_config import ModelConfig


class FTWTensors(TensorIndex):
    """The dense tensors of an FTW directory, already read (the ``TensorIndex`` of FTW)."""

    def __init__(self, root: Path, tensors: dict[str, torch.Tensor], files: dict[str, str]):
        self.dir, self.tensors, self.files = root, tensors, files

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        t = self.tensors.get(name)
        if t is None:
            raise CheckpointError(f"{self.dir}: tensor {name!r} is missing from the checkpoint")
        if shape is not None and tuple(shape) != tuple(t.shape):
            raise CheckpointError(
                f"{self.dir / self.files[name]}: tensor {name!r} has shape {list(t.shape)}, "
                f"expected {list(shape)} from config.json"
            )
        return t

    def dtype(self, name: str) -> torch.dtype:
        return self.get(name).dtype

    def native_raw(self, name: str):
        """(GGML type, stored rows uint8 [R, row bytes], columns) kept beside ``name`` when the FTW was
        written from a GGUF (``NATIVE_SUFFIX``; see GGUFIndex.native_raw); else None."""
        for ty in DENSE_TYPES:
            raw = self.tensors.get(name + NATIVE_SUFFIX + ty.lower())
            if raw is not None and name in self.tensors:
                return ty, raw.numpy(), self.tensors[name].shape[1]
        return None

    def file_of(self, name: str) -> Path:
        self.get(name)
        return self.dir / self.files[name]

    def read_into(self, jobs: list[tuple[str, torch.Tensor]]) -> None:
        for name, dest in jobs:
            dest.copy_(self.get(name, tuple(dest.shape)))

    def close(self) -> None:
        self.tensors.clear()


class FTWWeightReader(WeightReader):
    """WeightReader over an FTW directory; ``expert_bank`` hands over the bank read from it."""

    def __init__(
        self,
        tensors: FTWTensors,
        bank: ExpertBank | None,
        dtype: torch.dtype,
        cfg: ModelConfig,
        stats: dict,
    ):
        super().__init__(tensors, dtype, cfg.quant)
        self.bank, self.stats = bank, stats

    def expert_bank(self, cfg: ModelConfig, prefixes: list[str]) -> ExpertBank:
        b, where = self.bank, self.index.dir / "ftw_index.json"
        if b is None:
            raise CheckpointError(
                f"{where}: no expert bank, but config.json has {len(prefixes)} MoE layers"
            )
        m = cfg.moe
        want = (
            m.num_experts,
            cfg.hidden_size,
            m.intermediate,
            m.act,
            len(prefixes) * m.num_experts,
        )
        have = (b.num_experts, b.hidden, b.inter, b.act, b.num_ids)
        if want != have:
            raise CheckpointError(
                f"{where}: expert bank (experts, hidden, intermediate, act, ids) = {have} does not "
                f"match config.json {want}"
            )
        return b


def open_ftw(
    root: Path,
    dtype: torch.dtype,
    cfg: ModelConfig,
    threads: int | None = None,
    progress: bool | None = None,
    verify: bool = True,
) -> FTWWeightReader:
    """Read the FTW directory ``root`` for a model of ``cfg`` whose dense weights the engine wants in
    ``dtype``. Raises CheckpointError naming the file and tensor for a bad index, shard or checksum."""
    index = read_index(root)
    t0 = time.perf_counter()
    huge = env.flag("FT_LOAD_HUGEPAGES")
    dense = {
        e.name: aligned_empty(e.shape, DTYPES[e.dtype], huge)
        for e in index.entries
        if e.kind == "dense"
    }
    bank, bank_dest = _alloc_bank(index, huge)
    targets = [
        (e, byte_view(dense[e.name] if e.kind == "dense" else bank_dest[e])) for e in index.entries
    ]
    threads = threads or env.integer("FT_LOAD_THREADS")
    n_direct = _read_all(
        index, targets, threads, Progress(index.total_bytes, "loading", progress), verify
    )
    pinned = pin_in_place(list(bank.tensors.values()), bank) if bank is not None else False
    dt = time.perf_counter() - t0
    stats = {
        "bytes": index.total_bytes,
        "seconds": dt,
        "gbps": index.total_bytes / dt / 1e9,
        "threads": threads,
        "direct_bytes": n_direct,
        "pinned": pinned,
        "verified": verify,
    }
    logging.getLogger("ft_core.loader").info(
        "loaded FTW %s: %.2f GB in %.2fs (%.2f GB/s, %d threads, %.0f%% direct IO%s)",
        root,
        stats["bytes"] / 1e9,
        dt,
        stats["gbps"],
        threads,
        100 * n_direct / max(1, index.total_bytes),
        ", banks pinned" if pinned else "",
    )
    files = {e.name: e.file for e in index.entries if e.kind == "dense"}
    return FTWWeightReader(FTWTensors(root, dense, files), bank, dtype, cfg, stats)


def _alloc_bank(index: FTWIndex, huge: bool) -> tuple[ExpertBank | None, dict[Entry, torch.Tensor]]:
    """The ExpertBank with its tensors [N, ...] allocated, and each bank entry's destination rows."""
    meta = index.bank
    if meta is None:
        return None, {}
    try:
        N = int(meta["num_ids"])
        w13 = next((e for e in index.entries if e.kind == "bank" and e.name == "experts.w13"), None)
        fmt = bank_format(
            str(meta["fmt"]), DTYPES.get(w13.dtype) if w13 is not None else None
        )  # old names too
        bank = ExpertBank(
            fmt,
            int(meta["num_experts"]),
            int(meta["hidden"]),
            int(meta["inter"]),
            str(meta["act"]),
            {},
            int(meta["fp8_block"]),
            tuple(float(g) for g in meta["global_scale"]),
            tuple(tuple(str(f) for f in p) for p in meta.get("layer_fmts", ())),
        )
        names = [str(k) for k in meta["tensors"]]
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{index.path}: invalid bank record ({type(e).__name__}: {e})") from e
    dest: dict[Entry, torch.Tensor] = {}
    for k in names:
        parts = sorted(
            (e for e in index.entries if e.kind == "bank" and e.name == f"experts.{k}"),
            key=lambda e: e.rows,
        )
        if not parts:
            raise CheckpointError(f"{index.path}: bank tensor experts.{k} has no entries")
        trail, dt = parts[0].shape[1:], parts[0].dtype
        at = 0
        for e in parts:
            if (
                e.rows[0] != at
                or e.rows[1] - e.rows[0] != e.shape[0]
                or e.shape[1:] != trail
                or e.dtype != dt
            ):
                raise CheckpointError(
                    f"{index.path}: bank tensor experts.{k}: entry rows {list(e.rows)} do not "
                    f"continue rows [0, {at}) with shape [*, {', '.join(map(str, trail))}] {dt}"
                )
            at = e.rows[1]
        if at != N:
            raise CheckpointError(
                f"{index.path}: bank tensor experts.{k} covers {at} of {N} flat ids"
            )
        full = aligned_empty((N, *trail), DTYPES[dt], huge)
        bank.tensors[k] = full
        for e in parts:
            dest[e] = full[e.rows[0] : e.rows[1]]
    return bank, dest


def _read_all(index: FTWIndex, targets, threads: int, bar: Progress, verify: bool) -> int:
    """Read every chunk of every entry into its target; the first error cancels the rest. Returns the
    bytes read with direct IO."""
    files = ShardFiles(index.root, index.shards)
    jobs = [
        (e, dest, k)
        for e, dest in sorted(targets, key=lambda t: (t[0].file, t[0].offset))
        for k in range(len(e.checksum))
    ]
    direct = 0
    pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="ftw-read")
    try:

        def run(job):
            n, d = read_chunk(files, job[0], job[1], job[2], index.chunk, verify)
            bar.update(n)
            return d

        futures = [pool.submit(run, j) for j in jobs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f.done() and f.exception() is not None:
                raise f.exception()
        direct = sum(f.result() for f in futures)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        files.close()
        bar.close()
    return direct
