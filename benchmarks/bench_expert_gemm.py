"""Where a bf16 bank's prefill-sized experts run: the C++ kernel or torch's bf16 GEMM (``kernel_max_routes``).

    uv run python benchmarks/bench_expert_gemm.py --trace ../shared/traces/olmoe_decode_general_code.npz
        [--shapes 2048x768,4096x1536,7168x2048] [--tokens 128,512] [--limits none,256,64,16] [--experts 64]
        [--threads N] [--json FILE]

One MoE call (``CpuKernelBackend.run``, bf16 x) on a bank of ``--experts`` random bf16 experts of each shape
(hidden x inter: Qwen3-30B-A3B, a 4096 x 1536 middle size, DeepSeek-V3; the DeepSeek bank is 5.6 GB), routed as a
trained model routes a prompt: ``--tokens`` consecutive tokens of one MoE layer of a real routing trace (an
``.npz`` from ``../shared/traces/``, expert ids folded into the bank's count), timed best of 3 for every limit:
``none`` every expert on the kernel, ``N`` the experts with more than N routes on the GEMM. ``machine`` is what
``kernel_max_routes`` picks on this machine for that shape. Shows whether the machine's choice is the fastest.
Not part of CI (minutes, GBs).
"""

from __future__ import annotations

import argparse
import json
import time

import ft_kernels as fk
import numpy as np
import torch
from ft_core.experts.backends import CpuKernelBackend, kernel_max_routes
from ft_core.experts.bank import ExpertBank

LAYER = 5  # the trace's MoE layer whose routing the calls take


def trace_routes(path: str, tokens: int, experts: int) -> torch.Tensor:
    """Expert ids [tokens * top_k] of ``tokens`` consecutive tokens of trace layer LAYER, modulo ``experts``."""
    d = np.load(path)
    rows = np.nonzero(d["layer_index"] == LAYER)[0][:tokens]
    if len(rows) < tokens:
        raise SystemExit(f"{path}: only {len(rows)} tokens of layer {LAYER}, asked for {tokens}")
    return torch.from_numpy(d["requested_expert_ids"][rows].astype(np.int64) % experts).flatten()


def time_call(backend: CpuKernelBackend, bank, x, tok, eid, gate) -> float:
    backend.run(bank, x, tok, eid, gate)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        backend.run(bank, x, tok, eid, gate)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True, help="a routing trace .npz (../shared/traces/)")
    ap.add_argument(
        "--shapes", default="2048x768,4096x1536,7168x2048", help="hidden x inter, comma-separated"
    )
    ap.add_argument("--tokens", default="128,512", help="prompt lengths (comma-separated)")
    ap.add_argument(
        "--limits", default="none,256,64,16", help="max routes on the kernel: none or N"
    )
    ap.add_argument("--experts", type=int, default=64, help="experts in the bank (default 64)")
    ap.add_argument(
        "--threads", type=int, default=None, help="threads (default: the kernel pool's)"
    )
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args()
    threads = args.threads or fk.num_threads()
    fk.set_num_threads(threads)
    torch.set_num_threads(threads)
    limits = [None if v == "none" else int(v) for v in args.limits.split(",")]
    gen = torch.Generator().manual_seed(0)
    print(
        f"isa {fk.active_isa()}, AMX {torch.cpu._is_amx_tile_supported()}, {threads} threads, {args.experts} experts"
    )
    rows = []
    for shape in args.shapes.split(","):
        H, I = (int(v) for v in shape.split("x"))
        E = args.experts
        t = {
            "w13": torch.empty(E, 2 * I, H, dtype=torch.bfloat16).normal_(0, 0.02, generator=gen),
            "w2": torch.empty(E, H, I, dtype=torch.bfloat16).normal_(0, 0.02, generator=gen),
        }
        bank = ExpertBank("bf16", E, H, I, "swiglu", t)
        machine = kernel_max_routes(H, I)
        for T in (int(v) for v in args.tokens.split(",")):
            eid = trace_routes(args.trace, T, E)
            k = eid.numel() // T
            tok = torch.arange(T).repeat_interleave(k)
            gate = torch.rand(eid.numel(), generator=gen)
            x = torch.randn(T, H, generator=gen).bfloat16()
            counts = torch.bincount(eid, minlength=E)
            ms = {
                mr: 1e3 * time_call(CpuKernelBackend(max_routes=mr), bank, x, tok, eid, gate)
                for mr in limits
            }
            best = min(ms, key=ms.get)
            cells = "  ".join(f"{'none' if mr is None else mr}: {v:.1f}" for mr, v in ms.items())
            print(
                f"{H}x{I} T={T} (routes an expert: median {int(counts.median())}, max {int(counts.max())}) "
                f"ms  {cells}  | fastest {best}, machine's choice {machine}"
            )
            rows.append(
                {
                    "hidden": H,
                    "inter": I,
                    "tokens": T,
                    "ms": {str(mr): v for mr, v in ms.items()},
                    "fastest": best,
                    "machine": machine,
                }
            )
        del t, bank
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"isa": fk.active_isa(), "threads": threads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
