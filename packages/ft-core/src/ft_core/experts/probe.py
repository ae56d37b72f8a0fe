"""Bandwidth probe (DESIGN §3): B_H, the CPU expert kernel's achieved weight bytes/s, and B_P, pinned
host -> device copies of expert-sized rows. Measured on this machine, never taken from spec sheets,
and cached per machine and weight format in ``$FT_CACHE_DIR/probe.json`` (default ~/.cache/ft).
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from pathlib import Path

import torch

from ft_core.paths import cache_dir

# Qwen3-30B-A3B-shaped experts: rows the size real models have, not cache-resident toys.
H, I = 2048, 768


def _cache_file() -> Path:
    return cache_dir() / "probe.json"


def machine_key(fmt: str, device: str) -> str:
    import ft_kernels

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "none"
    # v2: records carry the layer step's fixed costs; v3: the cache's step timed on a page-locked bank,
    # i.e. the queued step the engine runs (older ones are measured again)
    return f"{cpu}|{os.cpu_count()} cpus|{ft_kernels.active_isa()}|{ft_kernels.num_threads()} threads|{gpu}|{fmt}|v3"


def _bank(fmt: str, bank_bytes: int):
    import ft_kernels as fk

    g = torch.Generator().manual_seed(0)
    one13 = fk.quantize(torch.randn(1, 2 * I, H, generator=g) * 0.05, fmt)
    one2 = fk.quantize(torch.randn(1, H, I, generator=g) * 0.05, fmt)
    per = one13.nbytes_per_expert() + one2.nbytes_per_expert()
    n = max(16, bank_bytes // per)

    def tile(w):
        rep = lambda t: None if t is None else t.expand(n, *t.shape[1:]).contiguous()  # noqa: E731
        return fk.ExpertWeights(
            w.fmt, rep(w.q), w.cols, rep(w.scale), rep(w.zero), w.group, w.global_scale
        )

    return tile(one13), tile(one2), per, n


def read_bandwidth(
    buf: torch.Tensor | None = None, threads: int | None = None, reps: int = 5
) -> float:
    """Bytes/s of a STREAM-style read of ``buf`` (default: a new 1 GiB fp32 tensor) on ``threads`` torch
    threads (default: as set), best of ``reps``: the yardstick benchmarks set kernel bandwidth against."""
    buf = torch.ones((1 << 30) // 4) if buf is None else buf
    prev = torch.get_num_threads()
    torch.set_num_threads(threads or prev)
    try:
        buf.sum()
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            buf.sum()
            best = min(best, time.perf_counter() - t)
    finally:
        torch.set_num_threads(prev)
    return buf.numel() * buf.element_size() / best


def host_bandwidth(fmt: str = "bf16", seconds: float = 1.5, bank_bytes: int = 1 << 30) -> float:
    """B_H in GB/s: distinct expert bytes / time of decode-shaped calls (1 token, top-8) over a bank
    larger than the caches, so every weight comes from DRAM."""
    import ft_kernels as fk

    w13, w2, per, n = _bank(fmt, bank_bytes)
    x, tok, gate = torch.randn(1, H), torch.zeros(8, dtype=torch.int32), torch.rand(8)
    g = torch.Generator().manual_seed(1)
    fk.moe_experts(x, tok, torch.arange(8, dtype=torch.int32), gate, w13, w2)  # warm-up
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        eid = torch.randperm(n, generator=g)[:8].to(torch.int32)
        fk.moe_experts(x, tok, eid, gate, w13, w2)
        done += 8 * per
    return done / (time.perf_counter() - t0) / 1e9


def pcie_bandwidth(device: str, seconds: float = 1.0) -> float | None:
    """B_P in GB/s: pinned host -> device copies of expert-sized rows; None without an accelerator."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    rows = torch.empty(8, 3 * H * I, dtype=torch.bfloat16).pin_memory()
    dst = torch.empty_like(rows, device=device)
    dst.copy_(rows, non_blocking=True)
    torch.cuda.synchronize(device)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        dst.copy_(rows, non_blocking=True)
        torch.cuda.synchronize(device)
        done += rows.numel() * rows.element_size()
    return done / (time.perf_counter() - t0) / 1e9


def host_bandwidth_during_copy(fmt: str, device: str, seconds: float = 1.0) -> float | None:
    """B_H while a host -> device copy stream runs (they share the memory bus); None without an accelerator."""
    if pcie_bandwidth(device, 0.05) is None:
        return None
    stop = threading.Event()

    def copier():
        while not stop.is_set():
            pcie_bandwidth(device, 0.2)

    t = threading.Thread(target=copier, daemon=True)
    t.start()
    try:
        return host_bandwidth(fmt, seconds)
    finally:
        stop.set()
        t.join()


def branch_seconds(device: str, steps: int = 200) -> float:
    """The fixed cost of a layer step that splits its routes (experts/timing.py's ``c``): queue a
    slot GEMM-sized nothing on the device's compute stream, wait for it, copy its [1, H] partial sum
    back and add it -- what CachedBackend pays per step beyond the expert bytes. Median seconds."""
    from ft_core.device import for_name

    dev = for_name(device)
    y = torch.zeros(1, H)
    part = torch.zeros(1, H, device=dev.name)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        ev = dev.compute.run(lambda: part + 1)
        ev.synchronize()
        y += ev.result().to("cpu")
        times.append(time.perf_counter() - t0)
    dev.close()
    return sorted(times)[len(times) // 2]


def step_costs(device: str, steps: int = 60) -> tuple[float, float]:
    """The fixed costs of one MoE layer step beyond its expert bytes, on ``device`` with the dense layers
    there (median seconds; ``probe`` asks only on an accelerator, the CPU stand-in runs it in tests):
    - the expert cache's (``CachedBackend.run`` with every route a hit: on a GPU the queued step, its
      graphs replayed, as the engine runs it on a page-locked bank), on a bank of 16 tiny bf16 experts;
    - the CPU-only path's (x copied to the host, the CPU kernels on the same tiny experts, y copied back).
    Measured with the engine's own classes, so what they cost per step is what ``auto`` charges."""
    from ft_core.device import for_name
    from ft_core.experts.backends import select_impl
    from ft_core.experts.bank import ExpertBank
    from ft_core.experts.cache import ExpertCache
    from ft_core.experts.cached import CachedBackend

    E, h, i = 8, 64, 32
    g = torch.Generator().manual_seed(0)
    bank = ExpertBank("bf16", num_experts=E, hidden=h, inter=i, act="swiglu")
    bank.tensors["w13"] = (torch.randn(2 * E, 2 * i, h, generator=g) * 0.1).bfloat16()
    bank.tensors["w2"] = (torch.randn(2 * E, h, i, generator=g) * 0.1).bfloat16()
    host = select_impl("auto", bank, 1.702, 7.0)
    dev = for_name(device)
    gpu = dev.name != "cpu"
    if gpu:  # page-locked, as the loader leaves a bank on a CUDA machine: the step the engine runs
        bank.tensors = {k: t.pin_memory() for k, t in bank.tensors.items()}
    sync = (lambda: torch.cuda.synchronize(dev.name)) if gpu else (lambda: None)
    cache = ExpertCache(bank, 2 * E, dev.name, "nextuse", "triton" if gpu else "torch")
    slot_impl = select_impl("triton" if gpu else "auto", cache.slot_bank(), 1.702, 7.0)
    cached = CachedBackend(cache, "fill", None, slot_impl, host, warmup_calls=2, device=dev)
    x = torch.randn(1, h, generator=g).bfloat16().to(dev.name)
    tok = torch.zeros(2, dtype=torch.int64, device=dev.name)
    gate = torch.full((2,), 0.5, device=dev.name)

    def median(fn) -> float:
        fn(0), fn(1)  # warm: kernels compiled, every expert resident
        times = []
        for k in range(steps):
            sync()
            t0 = time.perf_counter()
            fn(k % 2)
            sync()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    def on_cache(layer: int) -> None:
        eid = torch.tensor([layer * E, layer * E + 1], device=dev.name)
        cached.run(bank, x, tok, eid, gate)

    def on_host(layer: int) -> None:
        eid = torch.tensor([layer * E, layer * E + 1])
        host.run(bank, x.cpu(), tok.cpu(), eid, gate.cpu()).to(dev.name)

    try:
        for layer in (0, 1):  # every expert in its slot first: the timed steps all hit
            every = torch.arange(layer * E, (layer + 1) * E, device=dev.name)
            cached.run(
                bank, x, torch.zeros_like(every), every, torch.full((E,), 0.1, device=dev.name)
            )
        return median(on_cache), median(on_host)
    finally:
        dev.close()


def probe(fmt: str = "bf16", device: str = "cpu", use_cache: bool = True) -> dict:
    """Measured {"B_H", "B_H_during_copy", "B_P", "branch_us", "cached_step_us", "host_step_us", "key",
    "cached"}; read from / written to the cache file."""
    key = machine_key(fmt, device)
    f = _cache_file()
    table = {}
    if f.is_file():
        try:
            table = json.loads(f.read_text())
        except json.JSONDecodeError:
            table = {}
    if use_cache and key in table:
        return {**table[key], "key": key, "cached": True}
    gpu = device.startswith("cuda") and torch.cuda.is_available()
    cached_s, host_s = step_costs(device) if gpu else (None, None)
    rec = {
        "B_H": host_bandwidth(fmt),
        "B_H_during_copy": host_bandwidth_during_copy(fmt, device),
        "B_P": pcie_bandwidth(device),
        "branch_us": branch_seconds(device) * 1e6,
        "cached_step_us": None if cached_s is None else cached_s * 1e6,
        "host_step_us": None if host_s is None else host_s * 1e6,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    table[key] = rec
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(table, indent=2) + "\n")
    tmp.replace(f)
    return {**rec, "key": key, "cached": False}
