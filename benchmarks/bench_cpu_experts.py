"""CPU expert kernels (``ft_kernels.moe_experts``) against the machine's read bandwidth and against torch.

    uv run python benchmarks/bench_cpu_experts.py [--json FILE] [--quick] [--threads N] [--x-dtype D] [--formats F,..]

In one process: (1) a STREAM-style read of a 1 GiB fp32 tensor on the kernel's threads (torch ``sum``, best of
a few; one core reads less than all of them), measured again right before each format's rows since shared hosts drift, gives ``read_gbps``; (2) for Qwen3-30B-A3B-like experts (H=2048, I=768) and DeepSeek-V3-like ones
(H=7168, I=2048), every format and T = 1, 4, 8 (decode: each token has its own random top-8 of N
experts) and T = 512 (prefill), a bank of N expert slots totalling >= 1 GiB (a few quantised experts
copied into N distinct slots) so the weights come from DRAM, timed over several calls with fresh
routes (prefill routes use the bf16 bank's N for every format, so tokens per expert match torch's). ``--quick`` runs the T=1 rows only.
The 4-bit formats also run with int8 activations (rows ``<format>/q8``: ``act_int8=True``, opt-in, not exact).

Columns: ``weight_gbps`` = bytes of the distinct experts read (w13 + w2, ``nbytes_per_expert``) / time;
``ratio`` = weight_gbps / read_gbps, the fraction of the machine's bandwidth the kernel turns into
expert reads (decode is bandwidth-bound, so 1.0 is the ceiling; targets at T=1: >= 0.9 bf16, >= 0.8
fp8, >= 0.75 4-bit). ``torch_gbps`` is the same figure for a plain torch engine doing the same math
(a Python loop over experts, ``F.linear`` on bf16 weights of the same shape; for every format the
torch figure is for bf16 weights, as torch has no kernels for the others; at T <= 8 the better of
torch on all threads and on one, since OpenMP's passive wait can cost milliseconds per op on VMs); ``x_torch`` = how many
times faster the kernel is than torch: at T=512 torch time / kernel time per call (same tokens and
routes; the target is > 1), at T <= 8 distinct experts computed per second, kernel over torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch
import torch.nn.functional as F

import ft_kernels as fk
from ft_core.experts.probe import read_bandwidth
from ft_kernels.formats import REPACKED, ExpertWeights

SHAPES = {"qwen3-30b-a3b": (2048, 768), "deepseek-v3": (7168, 2048)}
TOPK = 8
BANK_BYTES = 1 << 30


def tile_bank(w: ExpertWeights, n: int) -> ExpertWeights:
    """``w`` with its K experts copied round-robin into ``n`` distinct slots (same bytes, new addresses)."""

    def rep(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        k = t.shape[0]
        return t.repeat((-(-n // k),) + (1,) * (t.dim() - 1))[:n].contiguous()

    return dataclasses.replace(w, q=rep(w.q), scale=rep(w.scale), zero=rep(w.zero))


def make_bank(fmt: str, H: int, I: int, k: int = 1) -> tuple[ExpertWeights, ExpertWeights]:
    """A bank of >= BANK_BYTES in ``fmt``: k random experts quantised one at a time, then tiled."""
    parts13, parts2 = [], []
    for _ in range(k):  # one expert at a time: the quantisers' temporaries are ~8x the fp32 weights
        parts13.append(fk.quantize(torch.randn(1, 2 * I, H) * 0.02, fmt))
        parts2.append(fk.quantize(torch.randn(1, H, I) * 0.02, fmt))
    cat = lambda ps, f: (
        None if getattr(ps[0], f) is None else torch.cat([getattr(p, f) for p in ps])
    )
    w13 = dataclasses.replace(
        parts13[0], q=cat(parts13, "q"), scale=cat(parts13, "scale"), zero=cat(parts13, "zero")
    )
    w2 = dataclasses.replace(
        parts2[0], q=cat(parts2, "q"), scale=cat(parts2, "scale"), zero=cat(parts2, "zero")
    )
    per = w13.nbytes_per_expert() + w2.nbytes_per_expert()
    n = max(-(-BANK_BYTES // per), 2 * TOPK)
    return tile_bank(w13, n), tile_bank(w2, n)


def routes(T: int, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each token's own random top-8 of n experts: tok, eid [T * 8] int32, gate [T * 8] float32."""
    eid = torch.rand(T, n, generator=gen).topk(TOPK, dim=1).indices
    tok = torch.arange(T).repeat_interleave(TOPK)
    return tok.int(), eid.flatten().int(), torch.rand(T * TOPK, generator=gen)


def torch_experts(x, tok, eid, gate, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """What a plain torch engine does: per routed expert, F.linear on bf16 weights, SwiGLU, gated sum."""
    I = w2.shape[2]
    y = torch.zeros(x.shape, dtype=torch.float32)
    xb = x.bfloat16()
    order = torch.argsort(eid, stable=True)
    ids, counts = torch.unique_consecutive(eid[order], return_counts=True)
    for e, idx in zip(ids.tolist(), torch.split(order, counts.tolist())):
        t = tok[idx].long()
        gu = F.linear(xb[t], w13[e])
        out = F.linear(F.silu(gu[:, :I]) * gu[:, I:], w2[e])
        y.index_add_(0, t, out.float() * gate[idx, None])
    return y


def time_calls(
    fn, T: int, n: int, per_expert: int, reps: int, gen: torch.Generator
) -> tuple[float, float]:
    """(bytes of distinct experts read per second, seconds per call) over ``reps`` calls with fresh routes."""
    fn(*routes(T, n, gen))  # warm-up
    total_bytes, total_s = 0, 0.0
    for _ in range(reps):
        tok, eid, gate = routes(T, n, gen)
        t = time.perf_counter()
        fn(tok, eid, gate)
        total_s += time.perf_counter() - t
        total_bytes += per_expert * len(torch.unique(eid))
    return total_bytes / total_s, total_s / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--json", default=None, help="write one JSON record per measurement to this file"
    )
    ap.add_argument("--quick", action="store_true", help="T=1 rows only (under a minute)")
    ap.add_argument(
        "--threads", type=int, default=None, help="kernel pool threads (default: the pool's size)"
    )
    ap.add_argument(
        "--x-dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="activations of ft's kernels (bfloat16: the path of a bfloat16 engine; default float32)",
    )
    ap.add_argument(
        "--formats",
        default=",".join(fk.FORMATS),
        help=f"comma-separated formats to run (default all: {','.join(fk.FORMATS)})",
    )
    args = ap.parse_args()
    xdt = getattr(torch, args.x_dtype)
    formats = [f for f in args.formats.split(",") if f]
    if bad := [f for f in formats if f not in fk.FORMATS]:
        ap.error(f"--formats: {', '.join(bad)} not among {', '.join(fk.FORMATS)}")

    threads = args.threads or fk.num_threads()
    buf = torch.ones(BANK_BYTES // 4, dtype=torch.float32)
    read = read_bandwidth(buf, threads)
    fk.set_num_threads(threads)
    torch.set_num_threads(threads)
    Ts = [1] if args.quick else [1, 4, 8, 512]
    gen = torch.Generator().manual_seed(0)
    print(
        f"isa {fk.active_isa()}, {threads} threads, x {args.x_dtype}, read bandwidth {read / 1e9:.1f} GB/s "
        f"(1 GiB fp32 sum, {threads} threads)"
    )
    print(
        f"{'shape':14} {'format':13} {'T':>4} {'N':>5} {'GB/s':>7} {'ratio':>6} {'torch GB/s':>10} {'x_torch':>7}"
    )
    records = []
    for shape, (H, I) in SHAPES.items():
        ref13, ref2 = make_bank("bf16", H, I)  # the torch engine's bank (bf16, same shapes)
        nt = ref13.num_experts
        per_bf16 = ref13.nbytes_per_expert() + ref2.nbytes_per_expert()
        torch_fig = {}
        for T in Ts:
            x = torch.randn(T, H)
            run = lambda tok, eid, gate: torch_experts(x, tok, eid, gate, ref13.q, ref2.q)
            if T >= 512:
                torch_fig[T] = time_calls(run, T, nt, per_bf16, 2, gen)
                continue
            # Decode: the better of torch on all threads and on one (OpenMP's passive wait can add ms per op).
            figs = []
            for tt in sorted({threads, 1}):
                torch.set_num_threads(tt)
                figs.append(time_calls(run, T, nt, per_bf16, 5, gen))
            torch.set_num_threads(threads)
            torch_fig[T] = max(figs)
        for fmt in formats:
            w13, w2 = (ref13, ref2) if fmt == "bf16" else make_bank(fmt, H, I)
            n, per = w13.num_experts, w13.nbytes_per_expert() + w2.nbytes_per_expert()
            # int8 rows where a SIMD kernel takes them (q6_k_x16 has none: it stays q6_k under int8 engines)
            int8 = fmt in fk.reference.INT8_FORMATS and (fk.int8_simd(fmt) or fmt not in REPACKED)
            # The rows-in-lanes layouts have kernels for bf16 and int8 activations only: fp32 ones take the scalar
            # twin there, a path no engine runs (an fp32 engine keeps the row-wise layout: x16_formats)
            exact = not (fmt in REPACKED and args.x_dtype == "float32")
            if not exact:
                print(
                    f"{shape:14} {fmt:13} fp32 x: no kernel in this layout (its row-wise format's rows are the "
                    "fp32 path; --x-dtype bfloat16 for its own)"
                )
            for q8 in ([False] if exact else []) + ([True] if int8 else []):
                read = read_bandwidth(
                    buf, threads, reps=3
                )  # this host's bandwidth drifts: measure next to each group
                for T in Ts:
                    x = torch.randn(T, H).to(xdt)
                    reps = 2 if T >= 512 else 8
                    out = torch.empty(T, H)
                    nr = (
                        min(n, nt) if T >= 512 else n
                    )  # prefill routes among torch's N: same tokens per expert
                    run = lambda tok, eid, gate, a=w13, b=w2: fk.moe_experts(
                        x,
                        tok,
                        eid,
                        gate,
                        a,
                        b,
                        out=out,  # noqa: E731
                        act_int8=q8,
                    )
                    gbps, secs = time_calls(run, T, nr, per, reps, gen)
                    t_gbps, t_secs = torch_fig[T]
                    # Prefill: same tokens and routes, so per-call times; decode: distinct experts per second.
                    x_torch = t_secs / secs if T >= 512 else (gbps / per) / (t_gbps / per_bf16)
                    label = f"{fmt}/q8" if q8 else fmt
                    print(
                        f"{shape:14} {label:13} {T:>4} {nr:>5} {gbps / 1e9:>7.2f} {gbps / read:>6.2f} "
                        f"{t_gbps / 1e9:>10.2f} {x_torch:>7.2f}",
                        flush=True,
                    )
                    records.append(
                        dict(
                            format=fmt,
                            act_int8=q8,
                            x_dtype=args.x_dtype,
                            H=H,
                            I=I,
                            T=T,
                            threads=threads,
                            weight_gbps=round(gbps / 1e9, 3),
                            read_gbps=round(read / 1e9, 3),
                            ratio=round(gbps / read, 4),
                            torch_gbps=round(t_gbps / 1e9, 3),
                        )
                    )
            del w13, w2
    if args.json:
        with open(args.json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
