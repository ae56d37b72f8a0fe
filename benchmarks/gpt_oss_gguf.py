"""A GPT-OSS-20B-shaped random GGUF in llama.cpp's MXFP4 MoE layout, for the side-by-side benchmark.

    uv run python benchmarks/gpt_oss_gguf.py [--layers 8] [--experts 32] [--out DIR]
    uv run python benchmarks/bench_vs_llamacpp.py --gguf DIR/mxfp4_moe.gguf --threads 1,2

What: GPT-OSS-20B's per-layer shapes (hidden 2880; 64 query / 8 KV heads of 64 with biases and per-head
sinks, sliding windows of 128 tokens on every other layer, YaRN RoPE; top-4 of 32 experts with intermediate
2880, biases and the clamped SwiGLU) with fewer layers (``--layers``, default 8 of its 24): the same work per
token and layer in a third of the disk and memory. Tensor types as ``llama-quantize MXFP4_MOE`` leaves them
(and as the released GGUFs carry the experts): experts MXFP4, the other matrices Q8_0, norms, biases, sinks and
the router F32. The vocabulary is Qwen's 151,936 tokens (llama.cpp's ``models/ggml-vocab-qwen2.gguf``, copied
field by field; GPT-OSS has 201,088): the LM head is 3/4 of GPT-OSS's.

The vendored llama.cpp converter has no GPT-OSS class, and a transformers checkpoint of this size is ~13 GB of
float32 per four layers, so the file is written straight from random blocks, one tensor at a time: MXFP4 blocks
of random E2M1 codes with E8M0 scales of 2^-8 .. 2^-6 (weights of |w| <= 0.09), Q8_0 blocks of random int8
with f16 scales of ~2^-10, norms near 1, small biases. Both engines read the same bytes. The file goes to
``--out`` (default ``~/.cache/ft/bench_vs_llamacpp/gpt-oss-L<layers>-E<experts>/mxfp4_moe.gguf``); an existing
one is kept. Not part of CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_vs_llamacpp import ensure_llama_cpp, import_gguf, log  # noqa: E402

from ft_core.paths import cache_dir  # noqa: E402

H, HEADS, KV, HD, INTER, TOP_K, WINDOW = 2880, 64, 8, 64, 2880, 4, 128  # GPT-OSS-20B


def mxfp4(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random MXFP4 blocks for a weight of ``shape`` (last dim a multiple of 32): [..., cols / 32 * 17] uint8,
    each block its E8M0 scale byte then 16 bytes of two E2M1 codes."""
    *lead, cols = shape
    blocks = rng.integers(0, 256, size=(*lead, cols // 32, 17), dtype=np.uint8)
    blocks[..., 0] = rng.integers(119, 122, size=blocks.shape[:-1], dtype=np.uint8)  # 2^-8 .. 2^-6
    return blocks.reshape(*lead, cols // 32 * 17)


def q8_0(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random Q8_0 blocks: [..., cols / 32 * 34] uint8, each block an f16 scale then 32 int8."""
    *lead, cols = shape
    n = int(np.prod(lead)) * (cols // 32)
    d = (rng.uniform(0.5, 1.0, size=n) * 2.0**-10).astype(np.float16).view(np.uint8).reshape(n, 2)
    q = rng.integers(-127, 128, size=(n, 32), dtype=np.int8).view(np.uint8)
    return np.concatenate([d, q], axis=1).reshape(*lead, cols // 32 * 34)


def f32(rng: np.random.Generator, shape: tuple[int, ...], mean: float = 0.0, std: float = 0.02):
    return (mean + std * rng.standard_normal(shape)).astype(np.float32)


def write(path: Path, layers: int, experts: int, vocab_file: Path, gguf, seed: int = 0) -> None:
    """The GGUF at ``path`` (written beside it, then renamed)."""
    rng = np.random.default_rng(seed)
    T = gguf.GGMLQuantizationType
    arch = "gpt-oss"
    voc = gguf.GGUFReader(str(vocab_file))
    n_vocab = len(voc.fields["tokenizer.ggml.tokens"].data)
    tmp = path.with_suffix(".part")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_name(f"gpt-oss-20b-shaped L{layers} E{experts} (random)")
    w.add_block_count(layers)
    w.add_context_length(131072)
    w.add_embedding_length(H)
    w.add_feed_forward_length(INTER)
    w.add_expert_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_expert_count(experts)
    w.add_expert_used_count(TOP_K)
    w.add_sliding_window(WINDOW)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_float32(f"{arch}.rope.scaling.yarn_beta_fast", 32.0)
    w.add_float32(f"{arch}.rope.scaling.yarn_beta_slow", 1.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    for name, field in voc.fields.items():
        if name.startswith("tokenizer.") and name != "tokenizer.chat_template":
            sub = field.types[1] if len(field.types) > 1 else None
            w.add_key_value(name, field.contents(), field.types[0], sub)

    def add(name: str, data: np.ndarray, qtype) -> None:
        w.add_tensor(name, data, raw_dtype=qtype)

    add("token_embd.weight", q8_0(rng, (n_vocab, H)), T.Q8_0)
    add("output_norm.weight", f32(rng, (H,), 1.0), T.F32)
    add("output.weight", q8_0(rng, (n_vocab, H)), T.Q8_0)
    for i in range(layers):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", f32(rng, (H,), 1.0), T.F32)
        add(b + "post_attention_norm.weight", f32(rng, (H,), 1.0), T.F32)
        for part, rows in (("q", HEADS * HD), ("k", KV * HD), ("v", KV * HD)):
            add(b + f"attn_{part}.weight", q8_0(rng, (rows, H)), T.Q8_0)
            add(b + f"attn_{part}.bias", f32(rng, (rows,)), T.F32)
        add(b + "attn_output.weight", q8_0(rng, (H, HEADS * HD)), T.Q8_0)
        add(b + "attn_output.bias", f32(rng, (H,)), T.F32)
        add(b + "attn_sinks.weight", f32(rng, (HEADS,), 0.0, 1.0), T.F32)
        add(b + "ffn_gate_inp.weight", f32(rng, (experts, H)), T.F32)
        add(b + "ffn_gate_inp.bias", f32(rng, (experts,)), T.F32)
        add(b + "ffn_gate_exps.weight", mxfp4(rng, (experts, INTER, H)), T.MXFP4)
        add(b + "ffn_up_exps.weight", mxfp4(rng, (experts, INTER, H)), T.MXFP4)
        add(b + "ffn_down_exps.weight", mxfp4(rng, (experts, H, INTER)), T.MXFP4)
        add(b + "ffn_gate_exps.bias", f32(rng, (experts, INTER)), T.F32)
        add(b + "ffn_up_exps.bias", f32(rng, (experts, INTER)), T.F32)
        add(b + "ffn_down_exps.bias", f32(rng, (experts, H)), T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    tmp.rename(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8, help="decoder layers (GPT-OSS-20B: 24)")
    ap.add_argument("--experts", type=int, default=32, help="experts a layer (GPT-OSS-20B: 32)")
    ap.add_argument("--out", type=Path, default=None, help="folder of the file")
    ap.add_argument("--llama-cpp", default=None, help="llama.cpp source tree with built binaries")
    args = ap.parse_args()
    if args.layers < 2 or args.experts < TOP_K:
        ap.error(f"--layers >= 2 (a windowed and a full layer) and --experts >= {TOP_K} (top-4)")
    out = args.out or cache_dir() / "bench_vs_llamacpp" / f"gpt-oss-L{args.layers}-E{args.experts}"
    path = out / "mxfp4_moe.gguf"
    if path.is_file():
        log(f"{path} exists: kept")
        return
    llama_dir = ensure_llama_cpp(args.llama_cpp)
    out.mkdir(parents=True, exist_ok=True)
    log(f"writing {path}")
    write(
        path,
        args.layers,
        args.experts,
        llama_dir / "models" / "ggml-vocab-qwen2.gguf",
        import_gguf(llama_dir),
    )
    log(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
