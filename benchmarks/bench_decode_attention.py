"""Decode attention over a paged bf16 KV cache at long contexts: ``ft_kernels.decode_attention`` with bf16 q (on a
CPU with AVX-512 BF16, the bf16 dot-product span: every KV head of a sequence a task, rows prefetched as runs of
pages) against the same call with fp32 q (the exact-product span a task per KV head, the path before it and on
other CPUs). Pools of ``--layers`` layers are visited in turn, so the keys and values come from DRAM as in a
model's decode step. Prints microseconds a layer, GB/s of K + V read and its ratio to the machine's read
bandwidth (measured in the same run), and the exact span's time over the bf16 one's.

    uv run python benchmarks/bench_decode_attention.py [--threads N] [--contexts 4096,16384,32768]
        [--heads 32,4,128;16,4,128] [--layers 6]
"""

from __future__ import annotations

import argparse
import json

import ft_kernels as fk
import torch
from bench_attention import best_of  # this folder, first on the path of a script run
from ft_core.experts.probe import read_bandwidth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--threads", type=int, default=None, help="kernel pool threads (default: the pool's)"
    )
    ap.add_argument(
        "--contexts", default="4096,16384,32768", help="keys of the one sequence (comma-separated)"
    )
    ap.add_argument(
        "--heads",
        default="32,4,128;16,4,128",
        help="query heads, KV heads, head width; shapes separated by ';' (default: Qwen3-30B-A3B's and 16,4,128)",
    )
    ap.add_argument(
        "--layers", type=int, default=6, help="layers' pools visited in turn (default 6)"
    )
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions, best kept (default 5)")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args()
    if args.threads:
        fk.set_num_threads(args.threads)
    torch.set_num_threads(fk.num_threads())
    bw = read_bandwidth(threads=fk.num_threads()) / 1e9
    print(f"isa {fk.active_isa()}, {fk.num_threads()} threads, read bandwidth {bw:.1f} GB/s")
    print(
        f"{'heads':>10} {'context':>8} {'bf16 us':>9} {'GB/s':>6} {'of BW':>6} {'exact us':>9} {'GB/s':>6} "
        f"{'exact/bf16':>10}"
    )
    rows = []
    g = torch.Generator().manual_seed(0)
    S = 16
    for shape in args.heads.split(";"):
        N, K, D = map(int, shape.split(","))
        for ctx in map(int, args.contexts.split(",")):
            pages = -(-ctx // S)
            pools = [
                (
                    torch.randn(pages, S, K, D, generator=g).bfloat16(),
                    torch.randn(pages, S, K, D, generator=g).bfloat16(),
                )
                for _ in range(args.layers)
            ]
            q = torch.randn(1, N, D, generator=g).bfloat16()
            qf = q.float()
            table = torch.randperm(pages, generator=g)[None]
            lens = torch.tensor([ctx])

            def run(qq, pools=pools):
                for kp, vp in pools:
                    fk.decode_attention(qq, kp, vp, table, lens, D**-0.5)

            t_bf = best_of(lambda: run(q), args.reps) / args.layers
            t_ex = best_of(lambda: run(qf), args.reps) / args.layers
            nbytes = 2 * ctx * K * D * 2  # K and V
            row = {
                "heads": [N, K, D],
                "context": ctx,
                "bf16_dot": fk.decode_attention_bf16(N, K, D, D),
                "bf16_us": t_bf * 1e6,
                "bf16_gbps": nbytes / t_bf / 1e9,
                "exact_us": t_ex * 1e6,
                "exact_gbps": nbytes / t_ex / 1e9,
                "read_gbps": bw,
                "ratio": t_ex / t_bf,
            }
            rows.append(row)
            print(
                f"{shape:>10} {ctx:>8} {row['bf16_us']:>9.0f} {row['bf16_gbps']:>6.1f} "
                f"{row['bf16_gbps'] / bw:>6.2f} {row['exact_us']:>9.0f} {row['exact_gbps']:>6.1f} "
                f"{row['ratio']:>10.2f}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"isa": fk.active_isa(), "threads": fk.num_threads(), "rows": rows}, f)


if __name__ == "__main__":
    main()
