"""GPT-OSS-shaped model on the CPU: sliding windows as per-sequence state vs paged KV, and prefill
attention with sinks on the fused flash kernel vs the blocked reference, all in one run.

    uv run python benchmarks/bench_window_state.py [--prompt-len 2048] [--decode-tokens 16] [--json FILE]

Writes (once, under $TMPDIR) a random checkpoint with GPT-OSS-20B's attention geometry (64 query heads,
8 KV heads, head dim 64, window 128, sinks, alternating sliding/full layers) but 8 layers, hidden 512
and 8 small experts, so attention is a large share of the work. Prints prefill seconds of
``--prompt-len`` tokens, decode tok/s at that context, KV bytes per token, and the ratios
(window state / paged KV; fused sinks / blocked sinks), checking that the greedy tokens are equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.modules.setdefault(
    "fla", None
)  # transformers would import flash-linear-attention (dev dependency) for nothing
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import torch  # noqa: E402

from ft_core import Engine, SamplingParams  # noqa: E402
from ft_core.layers import attention  # noqa: E402


def checkpoint() -> str:
    path = os.path.join(tempfile.gettempdir(), "ft-bench-gpt-oss-mid")
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return path
    import tiny_tokenizers
    import transformers

    cfg = transformers.GptOssConfig(
        vocab_size=800,
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=256,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=128,
        max_position_embeddings=16384,
        layer_types=["sliding_attention", "full_attention"] * 4,
    )
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(path)
    tiny_tokenizers.write_tokenizer("harmony", path)
    return path


def run(path: str, ids: list[int], decode: int, window_state: bool) -> dict:
    eng = Engine.from_pretrained(
        path, window_state=window_state, max_batch_tokens=len(ids), prefix_cache=False
    )
    seq = eng.add_request(
        ids, SamplingParams(max_tokens=decode + 1, temperature=0.0, ignore_eos=True)
    )
    t = time.perf_counter()
    eng.step()  # the whole prompt in one chunk, and the first token
    prefill = time.perf_counter() - t
    t = time.perf_counter()
    while not seq.finished:
        eng.step()
    return {
        "prefill_s": round(prefill, 2),
        "decode_tok_s": round(decode / (time.perf_counter() - t), 2),
        "kv_bytes_per_token": eng.model.kv_bytes_per_token(torch.float32),
        "tokens": list(seq.output_ids),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt-len", type=int, default=2048)
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    path = checkpoint()
    ids = [(i * 37 + 11) % 700 + 20 for i in range(a.prompt_len)]
    res = {
        "paged": run(path, ids, a.decode_tokens, False),
        "window_state": run(path, ids, a.decode_tokens, True),
    }
    fused, attention._FLASH_CPU = (
        attention._FLASH_CPU,
        None,
    )  # the blocked reference for sinks, same run
    try:
        res["window_state_blocked_sinks"] = run(path, ids, a.decode_tokens, True)
    finally:
        attention._FLASH_CPU = fused
    for name, r in res.items():
        print(
            f"{name:>27}: prefill {a.prompt_len} tokens {r['prefill_s']:7.2f} s, decode at that context "
            f"{r['decode_tok_s']:6.2f} tok/s, KV {r['kv_bytes_per_token']} B/token"
        )
    p, w, b = res["paged"], res["window_state"], res["window_state_blocked_sinks"]
    same = p["tokens"] == w["tokens"] == b["tokens"]
    ratios = {
        "window_state_prefill_speedup": round(p["prefill_s"] / w["prefill_s"], 2),
        "window_state_decode_speedup": round(w["decode_tok_s"] / p["decode_tok_s"], 2),
        "fused_sinks_prefill_speedup": round(b["prefill_s"] / w["prefill_s"], 2),
        "same_tokens": same,
    }
    print(ratios)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"prompt_len": a.prompt_len, **res, **ratios}, f, indent=1)


if __name__ == "__main__":
    main()
