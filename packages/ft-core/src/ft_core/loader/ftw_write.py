"""``ft convert``: a Hugging Face checkpoint directory or a GGUF model -> an FTW directory (``ftw_format.py``).

Atomic: everything is written into ``OUT.tmp-XXXX`` beside ``OUT`` (the index last, every file
fsynced) and renamed to ``OUT`` at the end. An interrupted conversion leaves only the temporary
directory, which never loads (no index) and which the next conversion into ``OUT`` removes once the
process that made it is gone (its pid is in ``convert.pid``).

Experts are read one MoE layer at a time with the engine's own bank loader (so the bytes are what
``Engine.from_pretrained`` on the HF directory would hold), converted (``ftw_bank.py``) and written
as rows of the merged banks; every other tensor is copied as stored (a GGUF's: as ft reads them,
under Hugging Face names, with config.json and the tokenizer files written from its metadata).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ft_core.errors import CheckpointError, FTError
from ft_core.loader.checkpoint import read_json
from ft_core.loader.ftw_bank import bank_absmax, check_format, convert_bank
from ft_core.loader.ftw_format import ALIGN, CHUNK, INDEX_NAME, NATIVE_SUFFIX, FTWIndex, is_ftw_dir
from ft_core.loader.ftw_shards import ShardWriter
from ft_core.loader.gguf_read import gguf_source, is_gguf
from ft_core.loader.model_ref import resolve_model
from ft_core.loader.progress import Progress
from ft_core.loader.convert_source import Source
from ft_core.loader.safetensors_index import SafetensorsIndex
from ft_core.loader.weights import WeightReader
from ft_core.models.config_parse import parse_config

_WEIGHT_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".gguf",
    ".ftw",
    ".safetensors.index.json",
    ".bin.index.json",
)


def convert(
    model: str | Path,
    out: str | Path,
    fmt: str = "auto",
    shard_bytes: int = 2 << 30,
    overwrite: bool = False,
    progress: bool | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Write the FTW form of checkpoint ``model`` into ``out`` and return a summary
    {"out", "bytes", "seconds", "shards", "bank_fmt"}.

    ``fmt``: "auto" keeps the stored expert format, else one of ``ftw_bank.FORMATS``. ``progress``: a
    bar on stderr (None: when stderr is a terminal). ``on_progress(done, total)`` is called after each
    tensor with source bytes. Raises CheckpointError / FTError with the file or option at fault."""
    src, out = resolve_model(str(model)), Path(out).expanduser()
    if shard_bytes < ALIGN:
        raise FTError(f"shard size {shard_bytes} bytes is below the {ALIGN}-byte alignment")
    if out.resolve() == src.resolve():
        raise CheckpointError(
            f"{out}: the output directory must differ from the checkpoint directory"
        )
    if out.exists() and not overwrite:
        raise CheckpointError(f"{out}: already exists (pass --overwrite to replace it)")
    source = gguf_source(src) if is_gguf(src) else _hf_source(src)
    try:
        cfg = source.cfg
        check_format(fmt, cfg.hidden_size, cfg.moe.intermediate if cfg.moe else 0)
        return _write(source, out, fmt, shard_bytes, progress, on_progress)
    finally:
        source.close()


def _hf_source(src: Path) -> Source:
    if not (src / "config.json").is_file():
        raise CheckpointError(f"{src}: not a checkpoint directory (no config.json)")
    if is_ftw_dir(src):
        raise CheckpointError(
            f"{src}: already an FTW directory (convert the Hugging Face checkpoint it came from)"
        )
    cfg = parse_config(read_json(src / "config.json", True), src / "config.json")
    index = SafetensorsIndex(src)
    try:
        prefixes = _moe_prefixes(index, cfg) if cfg.moe else []
    except BaseException:
        index.close()
        raise
    return Source(
        cfg,
        index,
        WeightReader(index, torch.float32, cfg.quant),
        prefixes,
        lambda p: sum(_nbytes(index, n) for n in index.names() if n.startswith(f"{p}.experts.")),
        _source_bytes(index),
        lambda dst: _copy_metadata(src, dst),
        index.close,
    )


def _write(source: Source, out: Path, fmt, shard_bytes, progress, on_progress) -> dict:
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(out)
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
    t0 = time.perf_counter()
    try:
        (tmp / "convert.pid").write_text(f"{os.getpid()}\n")
        # first: a killed run's leftovers then fail with "missing FTW index"
        source.write_metadata(tmp)
        writer = ShardWriter(tmp, shard_bytes)
        bar = Progress(source.total_bytes, "converting", progress)
        try:
            bank_meta = _write_all(source, fmt, writer, bar, on_progress)
        finally:
            bar.close()
        writer.close()
        ftw = FTWIndex(tmp, tuple(writer.entries), bank_meta, dict(writer.shards), CHUNK)
        _write_synced(tmp / INDEX_NAME, json.dumps(ftw.to_json(), indent=1))
        _fsync_dir(tmp)
        _move_into_place(tmp, out)
        (out / "convert.pid").unlink()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "out": str(out),
        "bytes": ftw.total_bytes,
        "seconds": time.perf_counter() - t0,
        "shards": len(ftw.shards),
        "bank_fmt": bank_meta["fmt"] if bank_meta else None,
    }


def _write_all(source: Source, fmt, writer: ShardWriter, bar: Progress, on_progress) -> dict | None:
    """Dense tensors as stored, then the banks layer by layer. Returns the index's ``bank`` record."""
    cfg, index, reader, prefixes = source.cfg, source.index, source.reader, source.prefixes
    expert_heads = tuple(f"{p}.experts." for p in prefixes)
    total, done = bar.total, 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        bar.update(n)
        if on_progress is not None:
            on_progress(done, total)

    for name in index.names():
        if not name.startswith(expert_heads):
            t = index.get(name)
            writer.add_dense(name, t)
            advance(t.numel() * t.element_size())
            native = getattr(index, "native_raw", None)  # a GGUF's stored bits, for keep_native
            if native is not None and name.endswith(".weight") and (x := native(name)) is not None:
                raw = torch.from_numpy(np.ascontiguousarray(x[1]))
                writer.add_dense(name + NATIVE_SUFFIX + x[0].lower(), raw)
    if not prefixes:
        return None
    absmax = None
    if fmt == "nvfp4":  # first pass: the global scale spans the whole bank
        maxes = [bank_absmax(reader.expert_bank(cfg, [p])) for p in prefixes]
        absmax = (max(m[0] for m in maxes), max(m[1] for m in maxes))
    E, meta = cfg.moe.num_experts, None
    for m, p in enumerate(prefixes):
        bank = convert_bank(reader.expert_bank(cfg, [p]), fmt, absmax).padded()  # FTW's rows
        for k, t in bank.tensors.items():
            writer.add_rows(f"experts.{k}", t, m * E)
        fmts = meta["layer_fmts"] if meta else []
        fmts += [list(f) for f in bank.layer_fmts]  # mixed banks: each layer's (w13, w2) formats
        meta = meta or {
            "fmt": bank.fmt,
            "num_experts": E,
            "hidden": bank.hidden,
            "inter": bank.inter,
            "act": bank.act,
            "num_ids": len(prefixes) * E,
            "fp8_block": bank.fp8_block,
            "global_scale": list(bank.global_scale),
            "layer_fmts": fmts,
            "tensors": list(bank.tensors),
        }
        advance(source.layer_bytes(p))
    return meta


def _nbytes(index: SafetensorsIndex, name: str) -> int:
    info = index.tensors[name]
    return math.prod(info.shape) * info.dtype.itemsize


def _moe_prefixes(index: SafetensorsIndex, cfg) -> list[str]:
    """The MLP module name of each MoE layer, as the checkpoint spells it (``model.layers.3.mlp``; the
    text model of vision-language checkpoints lives under ``model.language_model.``, as the Decoder reads it)."""
    m = "model.language_model." if "model.language_model.embed_tokens.weight" in index else "model."
    found = {}
    for n in index.names():
        head, sep, _ = n.partition(".experts.")
        if sep and head.startswith(f"{m}layers."):
            found.setdefault(int(head[len(m) + len("layers.") :].split(".")[0]), head)
    missing = [i for i in range(cfg.num_layers) if cfg.moe_layers[i] and i not in found]
    if missing:
        raise CheckpointError(
            f"{index.dir}: no expert tensors ({m}layers.{missing[0]}.*.experts.*) for MoE layer "
            f"{missing[0]}"
        )
    return [found[i] for i in range(cfg.num_layers) if cfg.moe_layers[i]]


def _source_bytes(index: SafetensorsIndex) -> int:
    return sum(_nbytes(index, n) for n in index.names())


def _copy_metadata(src: Path, dst: Path) -> None:
    """config.json, generation_config.json, tokenizer and chat-template files: every top-level file that
    is not a weight file."""
    for f in sorted(src.iterdir()):
        if f.is_file() and not f.name.endswith(_WEIGHT_SUFFIXES):
            shutil.copy2(f, dst / f.name)
            with open(dst / f.name, "rb") as fh:
                os.fsync(fh.fileno())


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an existing ``out`` (overwrite) is moved aside first, then removed."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f"{out.name}.old-", dir=out.parent))
        out.rename(old / out.name)
    tmp.rename(out)
    _fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_stale_tmp(out: Path) -> None:
    """Remove ``OUT.tmp-*`` directories of conversions whose process is gone (killed mid-way)."""
    for d in out.parent.glob(f"{out.name}.tmp-*"):
        try:
            pid = int((d / "convert.pid").read_text())
        except (
            OSError,
            ValueError,
        ):  # no pid yet: skip it while it may be a conversion starting now
            pid = None
            if time.time() - d.stat().st_mtime < 60:
                continue
        if pid is not None and _alive(pid):
            continue
        shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
