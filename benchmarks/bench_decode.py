"""Prefill and decode speed of ft_core.Engine on the CPU, with decode set against memory bandwidth.

    uv run python benchmarks/bench_decode.py [--model PATH] [--dtype float32|bfloat16] [--prompt-len 256]
        [--decode-tokens 64] [--concurrent 4] [--dense-format FMT] [--int8-activations] [--json FILE]

Prints prefill tok/s, decode tok/s (batch 1, greedy; and of ``--concurrent`` sequences at once, with
its ratio to one), the weight bytes one decode token reads
(dense weights + top-k experts of every MoE layer), and that traffic over the machine's read
bandwidth measured in this same process (a torch sum over a buffer far larger than the caches).
A tiny model fits in the CPU caches, so its ratio can exceed 1: it says nothing about DRAM there.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from ft_core import Engine, SamplingParams
from ft_core.experts.probe import read_bandwidth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="checkpoint directory (default: the demo model)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument(
        "--concurrent",
        type=int,
        default=4,
        help="also decode this many sequences at once (1: skip)",
    )
    ap.add_argument(
        "--dense-format", default=None, help="EngineConfig.dense_format (e.g. int4_sym, mxfp4)"
    )
    ap.add_argument(
        "--int8-activations", action="store_true", help="EngineConfig.int8_activations (opt-in)"
    )
    ap.add_argument(
        "--json", default=None, help="also write the figures to this file as one JSON object"
    )
    args = ap.parse_args()

    eng = Engine.from_pretrained(
        args.model,
        dtype=args.dtype,
        dense_format=args.dense_format,
        int8_activations=args.int8_activations,
    )
    vocab = eng.model_config.vocab_size
    prompt = [(i * 7919 + 13) % (vocab - 10) + 5 for i in range(args.prompt_len)]
    eng.score(prompt[:16])  # warm-up

    t = time.perf_counter()
    eng.generate([prompt], SamplingParams(max_tokens=1, temperature=0, ignore_eos=True))
    prefill_s = time.perf_counter() - t

    def decode(n: int) -> float:
        """tok/s of n greedy sequences decoding together through Engine.step (distinct 32-token prompts)."""
        p = SamplingParams(max_tokens=args.decode_tokens + 1, temperature=0, ignore_eos=True)
        seqs = [
            eng.add_request([(t + 101 * i) % (vocab - 10) + 5 for t in prompt[:32]], p)
            for i in range(n)
        ]
        while not all(s.output_ids for s in seqs):  # prefills and first tokens
            eng.step()
        t = time.perf_counter()
        while not all(s.finished for s in seqs):
            eng.step()
        return n * args.decode_tokens / (time.perf_counter() - t)

    decode_tps = decode(1)
    decode_s = args.decode_tokens / decode_tps
    batch_tps = decode(args.concurrent) if args.concurrent > 1 else None

    bw = read_bandwidth()
    bpt = eng.model.weight_bytes_per_token()
    res = {
        "model": str(eng.config.model),
        "dtype": args.dtype,
        "dense_format": args.dense_format,
        "int8_activations": args.int8_activations,
        "expert_backend": eng.model.backend.name if eng.model.backend else None,
        "prefill_tokens": args.prompt_len,
        "prefill_tok_s": args.prompt_len / prefill_s,
        "decode_tokens": args.decode_tokens,
        "decode_tok_s": decode_tps,
        "decode_ms_per_token": 1000 * decode_s / args.decode_tokens,
        "concurrent": args.concurrent,
        "concurrent_tok_s": batch_tps,
        "concurrent_over_one": batch_tps / decode_tps if batch_tps else None,
        "weight_bytes_per_decode_token": bpt,
        "read_bandwidth_GBs": bw / 1e9,
        "decode_bytes_over_read_bandwidth": decode_tps * bpt / bw,
        "threads": torch.get_num_threads(),
    }
    for k, v in res.items():
        print(f"{k:34s} {v:.4g}" if isinstance(v, float) else f"{k:34s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
