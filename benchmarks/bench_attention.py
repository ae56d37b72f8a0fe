"""Prefill attention over a paged bf16 KV cache, 16 query / 4 KV heads of 128 (the mid model's; ``--heads``):
``ft_kernels.prefill_attention`` (the pools read in place) against the path a bf16 engine took before it and
still takes on CPUs without AVX-512 BF16 -- the context gathered, converted to fp32, torch's SDPA with the
causal mask (``ft_core.layers.attention.paged_attention``). One sequence; a chunk of ``--chunk`` new tokens after
each context of ``--contexts`` tokens (a long prompt is prefilled in such chunks). Prints ms, GFLOP/s of the
causal work (4 N D flops a visible query-key pair) and torch's time over ft's, measured in the same run.

    uv run python benchmarks/bench_attention.py [--threads N] [--contexts 0,2048,6144,14336] [--chunk 2048]
"""

from __future__ import annotations

import argparse
import json
import time

import ft_kernels as fk
import torch
from ft_core.layers.attention import paged_attention
from ft_core.layers.batch import ForwardBatch


def best_of(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="kernel pool and torch threads (default: the pool's)",
    )
    ap.add_argument(
        "--contexts", default="0,2048,6144,14336", help="tokens before the chunk (comma-separated)"
    )
    ap.add_argument(
        "--chunk", type=int, default=2048, help="new tokens (default 2048, ft's prefill chunk)"
    )
    ap.add_argument(
        "--heads", default="16,4,128", help="query heads, KV heads, head width (default 16,4,128)"
    )
    ap.add_argument("--reps", type=int, default=2, help="timed repetitions, best kept (default 2)")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args()
    if args.threads:
        fk.set_num_threads(args.threads)
    torch.set_num_threads(fk.num_threads())
    N, K, D = map(int, args.heads.split(","))
    S, L = 16, args.chunk
    print(
        f"isa {fk.active_isa()}, prefill_attention_simd {fk.prefill_attention_simd()}, {fk.num_threads()} threads"
    )
    print(
        f"{'context':>8} {'new':>6} {'ft ms':>9} {'GFLOP/s':>8} {'torch ms':>9} {'GFLOP/s':>8} {'torch/ft':>9}"
    )
    rows = []
    g = torch.Generator().manual_seed(0)
    for C in map(int, args.contexts.split(",")):
        ctx = C + L
        pages = -(-ctx // S)
        kp = torch.randn(pages, S, K, D, generator=g).bfloat16()
        vp = torch.randn(pages, S, K, D, generator=g).bfloat16()
        q = torch.randn(L, N, D, generator=g).bfloat16()
        table = torch.randperm(pages, generator=g)[None]
        bt = ForwardBatch(
            input_ids=torch.zeros(L, dtype=torch.int64),
            positions=torch.arange(C, ctx),
            slots=torch.zeros(L, dtype=torch.int64),
            page_table=table,
            q_lens=[L],
            ctx_lens=[ctx],
            page_size=S,
        )
        scale = D**-0.5

        def ft():
            return fk.prefill_attention(
                q, kp, vp, table, bt.q_lens_tensor(), bt.ctx_tensor(), scale
            )

        def gathered():
            rows_ = (table[0, :, None] * S + torch.arange(S)).reshape(-1)
            kc = kp.view(-1, K, D)[rows_][None]
            vc = vp.view(-1, K, D)[rows_][None]
            return paged_attention(q, kc, vc, bt, scale)

        t_ft, t_torch = best_of(ft, args.reps), best_of(gathered, args.reps)
        flops = 4 * N * D * L * (C + (L + 1) / 2)
        row = {
            "context": C,
            "new": L,
            "ft_ms": t_ft * 1e3,
            "torch_ms": t_torch * 1e3,
            "ft_gflops": flops / t_ft / 1e9,
            "torch_gflops": flops / t_torch / 1e9,
            "ratio": t_torch / t_ft,
        }
        rows.append(row)
        print(
            f"{C:>8} {L:>6} {row['ft_ms']:>9.1f} {row['ft_gflops']:>8.0f} {row['torch_ms']:>9.1f} "
            f"{row['torch_gflops']:>8.0f} {row['ratio']:>9.2f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "isa": fk.active_isa(),
                    "threads": fk.num_threads(),
                    "heads": [N, K, D],
                    "rows": rows,
                },
                f,
            )


if __name__ == "__main__":
    main()
