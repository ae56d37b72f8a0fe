"""A Qwen3.5-35B-A3B-shaped random checkpoint as llama.cpp's own GGUF files, for the side-by-side benchmark.

    uv run python benchmarks/qwen35_gguf.py [--layers 8] [--experts 64] [--quant Q4_K_M] [--out DIR]
    uv run python benchmarks/bench_vs_llamacpp.py --gguf DIR/q4_k_m.gguf --threads 1,2

What: Qwen3.5-35B-A3B's per-layer shapes (hidden 2048; Gated DeltaNet with 16 key / 32 value heads of 128
and a 4-tap conv; gated full attention every fourth layer, 16 query / 2 KV heads of 256; top-8 of the
routed experts with intermediate 512 and a gated shared expert of 512) with fewer layers (``--layers``,
default 8 of its 40) and experts (``--experts``, default 64 of its 256): the same work per token and layer,
in less disk and memory. Qwen's own 151,936-token vocabulary (llama.cpp's ``models/ggml-vocab-qwen2.gguf``,
rebuilt as a tokenizer), so the LM head is real-sized. Random bf16 weights from ``transformers``'
``Qwen3_5Moe`` classes (tests/tiny_checkpoints.py's builder with these sizes), converted by llama.cpp's own
``convert_hf_to_gguf.py --outtype bf16 --no-mtp`` and quantised by its ``llama-quantize`` (the llama.cpp
bench_vs_llamacpp.py builds). Files under ``--out`` (default ``~/.cache/ft/bench_vs_llamacpp/qwen35-L<layers>
-E<experts>``): ``hf/``, ``bf16.gguf``, ``<quant>.gguf``; existing ones are kept. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_vs_llamacpp import ensure_llama_cpp, llama_bins, log  # noqa: E402

from ft_core.paths import cache_dir  # noqa: E402


def sizes(layers: int, experts: int, vocab: int) -> dict:
    """Qwen3.5-35B-A3B's config fields, with ``layers`` (full attention every fourth) and ``experts``."""
    return dict(
        vocab_size=vocab,
        hidden_size=2048,
        num_hidden_layers=layers,
        head_dim=256,
        num_attention_heads=16,
        num_key_value_heads=2,
        layer_types=["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)],
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        num_experts=experts,
        num_experts_per_tok=8,
        max_position_embeddings=262144,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8, help="decoder layers (Qwen3.5-35B-A3B: 40)")
    ap.add_argument("--experts", type=int, default=64, help="routed experts (Qwen3.5-35B-A3B: 256)")
    ap.add_argument("--quant", default="Q4_K_M", help="llama-quantize type of the second file")
    ap.add_argument("--out", type=Path, default=None, help="folder of the files")
    ap.add_argument("--llama-cpp", default=None, help="llama.cpp source tree with built binaries")
    args = ap.parse_args()
    if args.layers < 4 or args.experts < 8:
        ap.error("--layers >= 4 (one full-attention layer) and --experts >= 8 (top-8)")
    out = args.out or cache_dir() / "bench_vs_llamacpp" / f"qwen35-L{args.layers}-E{args.experts}"
    llama_dir = ensure_llama_cpp(args.llama_cpp)
    hf, bf16, quant = out / "hf", out / "bf16.gguf", out / f"{args.quant.lower()}.gguf"
    if not (hf / "config.json").is_file():
        import tiny_checkpoints
        from ft_core.loader.gguf_file import GGUFFile
        from ft_core.tokenizer.gguf_vocab import gguf_tokenizer

        vocab_file = llama_dir / "models" / "ggml-vocab-qwen2.gguf"
        tok, tok_config, _, _ = gguf_tokenizer(GGUFFile(vocab_file), str(vocab_file))
        ov = sizes(args.layers, args.experts, tok.get_vocab_size())
        log(f"writing the random checkpoint to {hf}")
        tiny_checkpoints.make_checkpoint("qwen3_5_moe", hf, overrides=ov)
        tok.save(str(hf / "tokenizer.json"))
        (hf / "tokenizer_config.json").write_text(
            json.dumps({**tok_config, "tokenizer_class": "Qwen2Tokenizer"})
        )
    for path, cmd in (
        (bf16, [sys.executable, llama_dir / "convert_hf_to_gguf.py", hf, "--outtype", "bf16", "--no-mtp",
                "--outfile"]),
        (quant, [llama_bins(llama_dir)[1], bf16]),
    ):  # fmt: skip
        if path.is_file():
            continue
        log(f"writing {path}")
        part = path.with_name(path.name + ".partial")
        cmd = [*map(str, cmd), str(part)] + ([args.quant] if path == quant else [])
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
        part.rename(path)
    print(quant)


if __name__ == "__main__":
    main()
