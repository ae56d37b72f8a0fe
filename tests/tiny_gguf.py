"""GGUF files of the tiny test checkpoints, written with llama.cpp's own Python writer (the ``gguf``
package) under llama.cpp's converter conventions (convert_hf_to_gguf.py): its metadata keys, tensor
names, per-expert tensors stacked into ``ffn_{gate,up,down}_exps`` [E, rows, cols], the Q / K rows of
``llama`` (Mixtral) permuted into GGML's rotary layout, norms and routers kept in F32, the tokenizer as
``tokenizer.ggml.*`` arrays and the chat template.

``write_gguf`` also writes the float32 Hugging Face checkpoint of the *same* weights -- every tensor
dequantised from the GGUF's bits by ``gguf.quants.dequantize`` (llama.cpp's independent reference)
and mapped back to its Hugging Face name -- for transformers to run as the reference.

Quantised types: those the ``gguf`` package quantises (Q8_0, Q4_0, Q4_1, Q5_0, MXFP4, BF16) from the
weights; the K-quants (Q4_K, Q5_K, Q6_K), which it only dequantises, as random but valid blocks
(random bytes, finite f16 super-block scales of a weight-like size).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

import tiny_formats as fmt

ARCH = {
    "qwen3_moe": "qwen3moe",
    "qwen2_moe": "qwen2moe",
    "olmoe": "olmoe",
    "mixtral": "llama",
    "gpt_oss": "gpt-oss",
}
# GPT-OSS's own names (before the generic table)
_GPT_OSS_NAMES = [
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.(\w+)", r"blk.\1.post_attention_norm.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.sinks", r"blk.\1.attn_sinks.weight"),
    (r"model\.layers\.(\d+)\.mlp\.router\.(\w+)", r"blk.\1.ffn_gate_inp.\2"),
]
# HF name (regex) -> GGUF name; experts handled apart
_NAMES = [
    (r"model\.embed_tokens\.weight", "token_embd.weight"),
    (r"model\.norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.(\w+)", r"blk.\1.attn_norm.\2"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.(\w+)", r"blk.\1.ffn_norm.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.q_proj\.(\w+)", r"blk.\1.attn_q.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.k_proj\.(\w+)", r"blk.\1.attn_k.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.v_proj\.(\w+)", r"blk.\1.attn_v.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.(\w+)", r"blk.\1.attn_output.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.q_norm\.(\w+)", r"blk.\1.attn_q_norm.\2"),
    (r"model\.layers\.(\d+)\.self_attn\.k_norm\.(\w+)", r"blk.\1.attn_k_norm.\2"),
    (r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.gate\.weight", r"blk.\1.ffn_gate_inp.weight"),
    (r"model\.layers\.(\d+)\.mlp\.shared_expert_gate\.weight", r"blk.\1.ffn_gate_inp_shexp.weight"),
    (r"model\.layers\.(\d+)\.mlp\.shared_expert\.(gate|up|down)_proj\.weight", r"blk.\1.ffn_\2_shexp.weight"),
    (r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", r"blk.\1.ffn_\2.weight"),
]  # fmt: skip
_EXPERT = re.compile(
    r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight"
)
_KIND = {
    "gate_proj": "gate",
    "w1": "gate",
    "up_proj": "up",
    "w3": "up",
    "down_proj": "down",
    "w2": "down",
}
_KQUANT = {
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
}  # byte offsets of the f16 d / dmin of a block


def _expert_type(experts: str, layer: int, kind: str, n: int) -> str:
    """GGML type of one expert tensor: ``experts`` itself, or for the mix "Q4_K_M" llama-quantize's rule
    (ffn_down in Q6_K on the layers use_more_bits picks -- the first and last eighth, every third
    between -- the rest Q4_K); "Q3_K_M" likewise with Q3_K, ffn_down Q5_K in the first sixteenth and Q4_K on
    the other use_more_bits layers."""
    if experts not in ("Q4_K_M", "Q3_K_M"):
        return experts
    more = layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2
    if experts == "Q3_K_M":
        if kind != "down":
            return "Q3_K"
        return "Q5_K" if layer < max(1, n // 16) else "Q4_K" if more else "Q3_K"
    return "Q6_K" if kind == "down" and more else "Q4_K"


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: HF's half-split rotary rows -> GGML's interleaved pairs."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    return (
        w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _encode(a: np.ndarray, qtype: str, rng: np.random.Generator):
    """(data to write, its GGML type, the values llama.cpp's dequantize gives back)."""
    import gguf

    T = gguf.GGMLQuantizationType[qtype]
    if qtype == "F32":
        return a.astype(np.float32), T, a.astype(np.float32)
    if qtype == "I32":  # a type ft refuses (bad-input tests): the values as integers
        return a.astype(np.int32), T, a.astype(np.float32)
    if qtype in _KQUANT:
        block, size = gguf.GGML_QUANT_SIZES[T]
        rows = a.reshape(-1, a.shape[-1])
        n = rows.shape[1] // block
        raw = rng.integers(0, 256, (rows.shape[0], n, size), dtype=np.uint8)
        for off in _KQUANT[qtype]:  # finite f16 scales: 6-bit sub-scales x 4..6-bit quants ~ 256 d
            d = (rng.uniform(0.5, 1.5, (rows.shape[0], n)) * np.abs(a).mean() / 256).astype(
                np.float16
            )
            raw[..., off : off + 2] = d.view(np.uint8).reshape(rows.shape[0], n, 2)
        data = raw.reshape(*a.shape[:-1], n * size)
    else:
        data = gguf.quants.quantize(a.astype(np.float32), T)
    return data, T, gguf.quants.dequantize(data, T).astype(np.float32).reshape(a.shape)


def _tokenizer_meta(w, hf_dir: Path) -> None:
    import gguf

    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    cfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    added = tok.get_added_tokens_decoder()
    types = [
        (gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        if i in added else gguf.TokenType.NORMAL
        for i in range(len(tokens))
    ]  # fmt: skip
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")  # the tiny tokenizers' byte-level GPT-2 split
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(merges)
    for key, add in (("bos_token", w.add_bos_token_id), ("eos_token", w.add_eos_token_id),
                     ("pad_token", w.add_pad_token_id)):  # fmt: skip
        if cfg.get(key):
            add(vocab[cfg[key]])
    w.add_add_bos_token(bool(cfg.get("bos_token")))
    if cfg.get("chat_template"):
        w.add_chat_template(cfg["chat_template"])


def write_gguf(
    hf_dir: Path, out: Path, experts: str = "F32", dense: str = "F32", split: int = 1, seed: int = 0
) -> tuple[Path, Path]:
    """Write ``hf_dir``'s model as GGUF ``out`` (``split`` > 1: that many ``-0000i-of-0000N`` parts;
    returns the first) with expert tensors in ``experts`` (or the mix "Q4_K_M") and other linear weights / embeddings in
    ``dense`` (GGML type names, or "Q4_K_M": v and the output in Q6_K); returns (GGUF path, the float32 HF reference
    directory)."""
    import gguf

    rng = np.random.default_rng(seed)
    cfg = json.loads((hf_dir / "config.json").read_text())
    mt = cfg["model_type"]
    arch = ARCH[mt]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
    n = cfg["num_hidden_layers"]
    E = cfg.get("num_experts") or cfg["num_local_experts"]
    tensors = {k: v.float().numpy() for k, v in fmt.read_tensors(hf_dir).items()}
    ref: dict[str, np.ndarray] = {}
    out_tensors: list[tuple[str, np.ndarray, object]] = []

    def add(gname, hf_names, a, qtype, unstack=None):
        """Write ``a`` as ``gname``; its dequantised values go to the reference (also returned)."""
        data, T, back = _encode(a, qtype, rng)
        out_tensors.append((gname, data, T))
        for i, h in enumerate(hf_names):
            ref[h] = unstack(back, i) if unstack else back
        return back

    stacks: dict[tuple[int, str], dict[int, str]] = {}
    names_table = (_GPT_OSS_NAMES if mt == "gpt_oss" else []) + _NAMES
    for name, a in sorted(tensors.items()):
        if mt == "gpt_oss" and ".mlp.experts." in name:
            continue  # fused and interleaved: below
        if m := _EXPERT.fullmatch(name):
            stacks.setdefault((int(m[1]), _KIND[m[3]]), {})[int(m[2])] = name
            continue
        for pat, rep in names_table:
            if re.fullmatch(pat, name):
                g = re.sub(pat, rep, name)
                break
        else:
            raise KeyError(f"no GGUF name for {name}")
        small = a.ndim == 1 or g.endswith(("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight"))
        small = small or g.endswith(".bias")
        qtype = "F32" if small else dense
        if (
            dense == "Q4_K_M"
        ):  # llama-quantize's mix, simplified: attn_v and the output in Q6_K, the rest Q4_K
            qtype = (
                "F32" if small else "Q6_K" if ".attn_v." in g or g == "output.weight" else "Q4_K"
            )
        if arch == "llama" and (".attn_q." in g or ".attn_k." in g):
            h = heads if ".attn_q." in g else kv
            add(g, [name], _permute(a, h), qtype, lambda b, i, h=h: _unpermute(b, h))
        elif g.endswith("ffn_gate_inp_shexp.weight"):  # [1, H] as [H], as llama-quantize writes it
            add(g, [name], a.reshape(-1), qtype, lambda b, i, s=a.shape: b.reshape(s))
        else:
            add(g, [name], a, qtype)
    if mt == "gpt_oss":
        _gpt_oss_experts(tensors, n, experts, add, ref)
    for (layer, kind), by_e in sorted(stacks.items()):
        names = [by_e[e] for e in range(E)]
        a = np.stack([tensors[x] for x in names])
        qtype = _expert_type(experts, layer, kind, n)
        add(f"blk.{layer}.ffn_{kind}_exps.weight", names, a, qtype, lambda b, i: b[i])

    per_part = -(
        -len(out_tensors) // split
    )  # gguf-py's own split writer (metadata in the first part)
    w = gguf.GGUFWriter(str(out), arch, split_max_tensors=per_part if split > 1 else 0)
    w.add_name(mt)
    w.add_block_count(n)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(
        (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 1e4))
    )
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if mt == "gpt_oss":
        rope = cfg["rope_parameters"]
        w.add_sliding_window(cfg["sliding_window"])
        w.add_expert_feed_forward_length(cfg["intermediate_size"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        w.add_float32(f"{arch}.rope.scaling.yarn_beta_fast", rope["beta_fast"])
        w.add_float32(f"{arch}.rope.scaling.yarn_beta_slow", rope["beta_slow"])
    if mt in ("qwen3_moe", "qwen2_moe"):
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if mt == "qwen2_moe":
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    else:
        w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    _tokenizer_meta(w, hf_dir)
    for g, data, T in out_tensors:
        w.add_tensor(g, data, raw_dtype=T)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    first = out if split == 1 else out.with_name(f"{out.stem}-00001-of-{split:05d}.gguf")

    ref_dir = out.with_name(out.stem + "-reference")
    ref_dir.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (hf_dir / f).is_file():
            shutil.copy(hf_dir / f, ref_dir / f)
    fmt.write_tensors(
        ref_dir, {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in ref.items()}
    )
    fmt.update_config(ref_dir, torch_dtype="float32")
    if mt == "mixtral":  # llama.cpp runs Mixtral without a sliding window
        fmt.update_config(ref_dir, sliding_window=None, use_sliding_window=False)
    return first, ref_dir


def _gpt_oss_experts(tensors, n: int, experts: str, add, ref: dict) -> None:
    """GPT-OSS's fused experts as llama.cpp writes them: gate_up_proj [E, H, 2I] transposed, its
    interleaved rows (gate even, up odd) split into ffn_gate_exps / ffn_up_exps [E, I, H], down_proj
    [E, I, H] transposed into ffn_down_exps [E, H, I]; the biases split likewise, in F32. The reference
    gets the dequantised values put back into Hugging Face's layout."""
    for i in range(n):
        p = f"model.layers.{i}.mlp.experts."
        gu = tensors[p + "gate_up_proj"].transpose(0, 2, 1)  # [E, 2I, H]
        gub = tensors[p + "gate_up_proj_bias"]  # [E, 2I]
        g = add(f"blk.{i}.ffn_gate_exps.weight", [], gu[:, 0::2], experts)
        u = add(f"blk.{i}.ffn_up_exps.weight", [], gu[:, 1::2], experts)
        d = add(
            f"blk.{i}.ffn_down_exps.weight",
            [],
            tensors[p + "down_proj"].transpose(0, 2, 1),
            experts,
        )
        gb = add(f"blk.{i}.ffn_gate_exps.bias", [], gub[:, 0::2], "F32")
        ub = add(f"blk.{i}.ffn_up_exps.bias", [], gub[:, 1::2], "F32")
        add(
            f"blk.{i}.ffn_down_exps.bias",
            [p + "down_proj_bias"],
            tensors[p + "down_proj_bias"],
            "F32",
        )
        inter = np.empty_like(gu)
        inter[:, 0::2], inter[:, 1::2] = g, u
        interb = np.empty_like(gub)
        interb[:, 0::2], interb[:, 1::2] = gb, ub
        ref[p + "gate_up_proj"] = inter.transpose(0, 2, 1)
        ref[p + "gate_up_proj_bias"] = interb
        ref[p + "down_proj"] = d.transpose(0, 2, 1)
