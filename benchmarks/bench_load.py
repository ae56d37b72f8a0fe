"""Time to ready from HF safetensors vs FTW, against the disk's own sequential read speed, cold cache.

    uv run python benchmarks/bench_load.py [--json FILE] [--size-gb 2.5] [--dir DIR] [--rounds 2] [--threads N]
    uv run python benchmarks/bench_load.py --gguf FILE [FILE ...] [--rounds 2] [--json FILE]

In one run: (1) writes a random qwen3_moe-shaped checkpoint of about ``--size-gb`` GB with
safetensors (real tensor names, Qwen3-30B-A3B expert shapes H=2048, I=768, 128 experts, per-expert
tensors, ~1 GB shards, a small tokenizer) under ``--dir`` (default: a temporary directory in /tmp;
it must be on the disk to measure, not tmpfs); (2) converts it to FTW (``ft convert``); (3) for
``--rounds`` rounds, each after dropping the page cache: reads the FTW shards sequentially with
8 MiB reads into one buffer, buffered (``dd bs=8M``) and direct (``iflag=direct``): the disk's
sequential read speed is the faster of the two; the same buffered reads each into fresh memory (the
least any loader does; on VMs whose balloon hands free memory back to the host, touching fresh
memory is itself slow); ``Engine.from_pretrained`` on the HF directory and on the FTW directory,
each in a fresh process (the order alternates between rounds). Time to ready is measured inside
the child around ``from_pretrained`` (bfloat16, a small KV pool), so interpreter start and imports
are excluded alike. The best round of each is reported (shared machines are noisy). The child also
reports its peak RSS (VmHWM) and (VmHWM - RSS before loading) / checkpoint bytes (target <= 1.15).

``--gguf``: the same timed load and peak RSS for GGUF files instead (their bytes: the file, every
part of a split one); nothing is written.

Cold cache: ``echo 3 > /proc/sys/vm/drop_caches`` when allowed (root), else ``posix_fadvise(DONTNEED)``
on every checkpoint file; the method used is printed. Ratios: FTW GB/s over disk GB/s (target
>= 0.8) and FTW time over HF time (target < 1). GB/s = checkpoint bytes / time to ready.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from random_ckpt import Shape, write_checkpoint as write_random_checkpoint


def write_checkpoint(out: Path, size_gb: float) -> int:
    """A random qwen3_moe checkpoint of about ``size_gb`` GB (Qwen3-30B-A3B expert shapes, 32 query
    heads, vocab 32000, ft's small BPE tokenizer); returns its number of layers."""
    one = Shape(layers=1)
    L = max(1, round((size_gb * 1e9 - one.vocab_bytes()) / one.layer_bytes()))
    write_random_checkpoint(out, Shape(layers=L))
    return L


def drop_cache(files: list[Path]) -> str:
    """Evict ``files`` from the page cache; returns the method that worked."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        pass
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "fadvise"


def sequential_read(
    files: list[Path], fresh: bool = False, direct: bool = False, block: int = 8 << 20
):
    """dd-like: read every file front to back with ``block``-byte reads into one reused buffer (``dd
    bs=8M``; ``direct``: ``iflag=direct``) or, ``fresh``, each block into new memory (what any loader
    must at least do). Returns (bytes, seconds)."""
    import mmap

    total = sum(p.stat().st_size for p in files)
    n, t0 = 0, time.perf_counter()
    mem = memoryview(
        mmap.mmap(-1, total if fresh else block, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    )
    for p in files:
        fd = os.open(p, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        try:
            while (k := os.readv(fd, [mem[n : n + block] if fresh else mem])) > 0:
                n += k
        finally:
            os.close(fd)
    return n, time.perf_counter() - t0


def _proc_status() -> dict:
    """VmRSS, VmHWM (peak RSS), RssAnon, RssFile of this process, bytes (Linux; {} elsewhere)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    keys = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
    return {k: int(v.split()[0]) * 1024 for k, v in (ln.split(":", 1) for ln in lines) if k in keys}


def checkpoint_files(path: Path) -> list[Path]:
    """The weight files of a checkpoint directory (safetensors / FTW) or GGUF model (every part)."""
    if path.is_file():
        from ft_core.loader.gguf_file import split_parts

        return split_parts(path)
    return sorted(f for f in path.iterdir() if f.suffix in (".safetensors", ".ftw"))


def gguf_rounds(paths: list[Path], rounds: int, threads: int | None, json_path: str | None) -> None:
    """``--gguf``: time to ready and peak RSS of each GGUF file (cold cache), best of ``rounds``."""
    out = {}
    for p in paths:
        files = checkpoint_files(p)
        runs = [timed_load(p, files, threads) for _ in range(rounds)]
        out[p.name] = min(runs, key=lambda r: r["seconds"])
    print(f"\ncold page cache via {next(iter(out.values()))['cache']}; best of {rounds} round(s)")
    print(
        f"{'GGUF -> ready':36s}{'GB':>7s}{'seconds':>10s}{'GB/s':>8s}{'peak RSS GB':>13s}{'x bytes':>9s}"
    )
    for name, r in out.items():
        peak = (
            f"{r['peak_rss'] / 1e9:13.2f}{r['peak_rss_over_bytes']:9.2f}" if "peak_rss" in r else ""
        )
        print(
            f"{name[:36]:36s}{r['bytes'] / 1e9:7.2f}{r['seconds']:10.2f}"
            f"{r['bytes'] / r['seconds'] / 1e9:8.2f}{peak}"
        )
    print("  x bytes = (VmHWM - RSS before loading) / file bytes (target <= 1.15)")
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=1))


def child(path: str) -> None:
    """Runs in a fresh process: time Engine.from_pretrained and print one JSON line, with peak RSS:
    ``peak_rss_over_bytes`` = (VmHWM after loading - VmRSS before it, imports done) / checkpoint bytes."""
    import logging

    from ft_core import Engine

    records = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())
    logging.getLogger("ft_core.loader").addHandler(handler)
    logging.getLogger("ft_core.loader").setLevel(logging.INFO)
    nbytes = sum(f.stat().st_size for f in checkpoint_files(Path(path)))
    base = _proc_status()
    t0 = time.perf_counter()
    eng = Engine.from_pretrained(path, dtype="bfloat16", kv_cache_bytes=16 << 20)
    dt = time.perf_counter() - t0
    after = _proc_status()
    mem = {}
    if after:
        mem = {
            "base_rss": base["VmRSS"],
            "peak_rss": after["VmHWM"],
            "rss_anon": after["RssAnon"],
            "rss_file": after["RssFile"],
            "peak_rss_over_bytes": (after["VmHWM"] - base["VmRSS"]) / nbytes,
        }
    print(
        json.dumps(
            {
                "seconds": dt,
                "num_ids": eng.model.bank.num_ids,
                "bytes": nbytes,
                **mem,
                "log": records,
            }
        )
    )


def timed_load(path: Path, files: list[Path], threads: int | None) -> dict:
    method = drop_cache(files)
    env = dict(os.environ, **({"FT_LOAD_THREADS": str(threads)} if threads else {}))
    res = subprocess.run(
        [sys.executable, __file__, "--child", str(path)], capture_output=True, text=True, env=env
    )
    if res.returncode:
        raise SystemExit(f"load of {path} failed:\n{res.stderr}")
    return {**json.loads(res.stdout.strip().splitlines()[-1]), "cache": method}


def fs_type(path: Path) -> str:
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mnt, typ = line.split()[:3]
        if str(path.resolve()).startswith(mnt) and len(mnt) > len(best):
            best, kind = mnt, f"{typ} ({dev})"
    return kind


def print_table(out: dict, best: dict, rounds: int) -> None:
    ftw_bytes, hf_bytes = out["ftw_bytes"], out["hf_bytes"]
    hf_gbps, ftw_gbps = out["hf_gbps"], out["ftw_gbps"]
    print(f"\ncold page cache via {out['cache_method']}; best of {rounds} round(s)")
    print(f"{'':28s}{'GB':>7s}{'seconds':>10s}{'GB/s':>8s}{'peak RSS GB':>13s}{'x bytes':>9s}")
    for key, label in (
        ("disk", "disk seq. read (dd bs=8M)"),
        ("disk_direct", "  the same, iflag=direct"),
    ):
        print(
            f"{label:28s}{ftw_bytes / 1e9:7.2f}{best[key]['seconds']:10.2f}{best[key]['gbps']:8.2f}"
        )
    print(
        f"{'dd into fresh memory':28s}{ftw_bytes / 1e9:7.2f}{best['fresh']['seconds']:10.2f}"
        f"{best['fresh']['gbps']:8.2f}"
    )
    for key, label, nbytes, gbps in (
        ("hf", "HF safetensors -> ready", hf_bytes, hf_gbps),
        ("ftw", "FTW -> ready", ftw_bytes, ftw_gbps),
    ):
        r = best[key]
        peak = (
            f"{r['peak_rss'] / 1e9:13.2f}{r['peak_rss_over_bytes']:9.2f}" if "peak_rss" in r else ""
        )
        print(f"{label:28s}{nbytes / 1e9:7.2f}{r['seconds']:10.2f}{gbps:8.2f}{peak}")
    if "peak_rss" in best["hf"]:
        print(
            "  peak RSS: VmHWM of the loading process; x bytes = (VmHWM - RSS before loading) / checkpoint "
            "bytes (target <= 1.15)"
        )
    print(
        f"FTW GB/s / disk GB/s = {out['ftw_over_disk']:.2f} (target >= 0.80; disk = the faster dd)"
    )
    per = sorted(out["ftw_over_disk_per_round"])
    print(
        f"  per round (same-round disk): {', '.join(f'{x:.2f}' for x in out['ftw_over_disk_per_round'])}; "
        f"median {per[len(per) // 2]:.2f}"
    )
    print(f"FTW GB/s / dd into fresh memory GB/s = {out['ftw_over_fresh_read']:.2f}")
    print(f"FTW time / HF time   = {out['ftw_time_over_hf']:.2f} (target < 1)")
    for line in best["ftw"]["log"]:
        print(f"  loader: {line}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--size-gb", type=float, default=2.5, help="checkpoint size to generate (default 2.5)"
    )
    ap.add_argument(
        "--dir", default=None, help="where to write the checkpoints (default: a temp dir in /tmp)"
    )
    ap.add_argument(
        "--rounds", type=int, default=2, help="measurement rounds; the best of each is reported"
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="FTW read threads (default: the loader's)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the generated checkpoints")
    ap.add_argument(
        "--json", default=None, help="also write the figures to this file as one JSON object"
    )
    ap.add_argument(
        "--gguf",
        nargs="+",
        default=None,
        metavar="FILE",
        help="instead: time to ready and peak RSS of these GGUF files (no checkpoint is written)",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if args.gguf:
        return gguf_rounds([Path(p) for p in args.gguf], args.rounds, args.threads, args.json)
    from ft_core.loader.ftw_write import convert

    work = Path(tempfile.mkdtemp(prefix="ft-bench-load-", dir=args.dir))
    try:
        hf, ftw = work / "hf", work / "ftw"
        t0 = time.perf_counter()
        L = write_checkpoint(hf, args.size_gb)
        print(
            f"wrote {hf} ({L} layers) in {time.perf_counter() - t0:.1f}s; file system: {fs_type(work)}"
        )
        conv = convert(hf, ftw, progress=False)
        print(
            f"converted to FTW in {conv['seconds']:.1f}s ({conv['bytes'] / conv['seconds'] / 1e9:.2f} GB/s)"
        )
        hf_files, ftw_files = sorted(hf.glob("*.safetensors")), sorted(ftw.glob("*.ftw"))
        hf_bytes, ftw_bytes = (
            sum(p.stat().st_size for p in hf_files),
            sum(p.stat().st_size for p in ftw_files),
        )
        rounds = []
        every = hf_files + ftw_files
        for i in range(args.rounds):
            r = {}
            for key, kw in (
                ("disk", {}),
                ("disk_direct", {"direct": True}),
                ("fresh", {"fresh": True}),
            ):
                method = drop_cache(every)
                n, dt = sequential_read(ftw_files, **kw)
                r[key] = {"seconds": dt, "gbps": n / dt / 1e9, "cache": method}
            for key in (
                ("hf", "ftw") if i % 2 == 0 else ("ftw", "hf")
            ):  # alternate: neither always goes first
                r[key] = timed_load(hf if key == "hf" else ftw, every, args.threads)
            rounds.append(r)
        best = {
            k: min((r[k] for r in rounds), key=lambda x: x["seconds"])
            for k in ("disk", "disk_direct", "fresh", "hf", "ftw")
        }
        disk_gbps = max(best["disk"]["gbps"], best["disk_direct"]["gbps"])
        hf_gbps, ftw_gbps = (
            hf_bytes / best["hf"]["seconds"] / 1e9,
            ftw_bytes / best["ftw"]["seconds"] / 1e9,
        )
        out = {
            "size_gb": ftw_bytes / 1e9,
            "hf_bytes": hf_bytes,
            "ftw_bytes": ftw_bytes,
            "layers": L,
            "file_system": fs_type(work),
            "cache_method": best["disk"]["cache"],
            "convert_seconds": conv["seconds"],
            "disk_gbps": disk_gbps,
            "disk_buffered_gbps": best["disk"]["gbps"],
            "disk_direct_gbps": best["disk_direct"]["gbps"],
            "fresh_memory_read_gbps": best["fresh"]["gbps"],
            "hf_seconds": best["hf"]["seconds"],
            "hf_gbps": hf_gbps,
            "ftw_seconds": best["ftw"]["seconds"],
            "ftw_gbps": ftw_gbps,
            "ftw_log": best["ftw"]["log"],
            **{
                f"{k}_{m}": best[k][m]
                for k in ("hf", "ftw")
                for m in ("peak_rss", "peak_rss_over_bytes")
                if m in best[k]
            },
            "ftw_over_disk": ftw_gbps / disk_gbps,
            "ftw_over_fresh_read": ftw_gbps / best["fresh"]["gbps"],
            "ftw_time_over_hf": best["ftw"]["seconds"] / best["hf"]["seconds"],
            "ftw_over_disk_per_round": [
                min(r["disk"]["seconds"], r["disk_direct"]["seconds"]) / r["ftw"]["seconds"]
                for r in rounds
            ],
            "rounds": rounds,
        }
        print_table(out, best, args.rounds)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
