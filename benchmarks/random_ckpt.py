"""Random Hugging Face ``qwen3_moe`` checkpoints for the benchmarks (bench_load, bench_vs_llamacpp).

``write_checkpoint(out, Shape(...))`` writes bf16 safetensors with real tensor names (per-expert
tensors, ~1 GB shards, an index), a ``config.json`` and a tokenizer: by default a small byte-level
BPE built by code (ft's demo tokenizer), or any ``tokenizers.Tokenizer`` passed in. Weights are
N(0, 0.02) from a seeded generator, norms are ones: the same shape and seed give the same files.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    """Geometry of a ``qwen3_moe`` checkpoint (defaults: Qwen3-30B-A3B's expert and attention sizes)."""

    layers: int
    hidden: int = 2048
    moe_intermediate: int = 768
    experts: int = 128
    top_k: int = 8
    heads: int = 32
    kv_heads: int = 4
    head_dim: int = 128
    vocab: int = 32000

    def layer_bytes(self) -> int:
        """bf16 bytes of one decoder layer: experts, q/k/v/o projections, router (norms left out)."""
        H, D = self.hidden, self.head_dim
        attn = (self.heads * D * H * 2 + self.kv_heads * D * H * 2) * 2
        return self.experts * 3 * self.moe_intermediate * H * 2 + attn + self.experts * H * 2

    def vocab_bytes(self) -> int:
        """bf16 bytes of the token embedding and the (untied) LM head together."""
        return 2 * self.vocab * self.hidden * 2

    def total_bytes(self) -> int:
        return self.vocab_bytes() + self.layers * self.layer_bytes()

    def describe(self) -> str:
        return (
            f"{self.layers} layers, {self.experts} experts top-{self.top_k}, H {self.hidden}, "
            f"I {self.moe_intermediate}, {self.heads}/{self.kv_heads} heads x {self.head_dim}, "
            f"vocab {self.vocab}, {self.total_bytes() / 1e9:.2f} GB bf16"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def write_checkpoint(
    out: Path,
    shape: Shape,
    tokenizer=None,
    eos_token: str = "<|im_end|>",
    pad_token: str | None = "<|endoftext|>",
    shard_bytes: float = 1e9,
    seed: int = 0,
) -> None:
    """Write a random ``qwen3_moe`` checkpoint of ``shape`` into the new directory ``out``.

    ``tokenizer``: a ``tokenizers.Tokenizer`` holding ``eos_token`` (and ``pad_token``); None: a
    1024-entry byte-level BPE with ft's demo special tokens. ``shape.vocab`` may exceed its size (the
    embedding rows past it are never looked up)."""
    import torch
    from safetensors.torch import save_file

    from ft_core.demo import CHAT_TEMPLATE, SPECIAL
    from ft_core.tokenizer.build import train_bpe, write_tokenizer_files

    s = shape
    H, I, E, D = s.hidden, s.moe_intermediate, s.experts, s.head_dim
    tok = tokenizer if tokenizer is not None else train_bpe(1024, SPECIAL)
    eos = tok.token_to_id(eos_token)
    if eos is None or tok.get_vocab_size() > s.vocab:
        raise ValueError(
            f"tokenizer: needs {eos_token!r} and at most {s.vocab} entries (has {tok.get_vocab_size()})"
        )
    out.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *sh: (torch.randn(*sh, generator=g) * 0.02).to(torch.bfloat16)  # noqa: E731
    weight_map, shard, n = {}, {}, 0

    def flush():
        nonlocal shard, n
        if shard:
            name = f"model-{n + 1:05d}.safetensors"
            save_file(shard, str(out / name), metadata={"format": "pt"})
            weight_map.update({k: name for k in shard})
            shard, n = {}, n + 1

    def add(name, t):
        shard[name] = t
        if sum(x.numel() * 2 for x in shard.values()) >= shard_bytes:
            flush()

    add("model.embed_tokens.weight", rnd(s.vocab, H))
    add("lm_head.weight", rnd(s.vocab, H))
    add("model.norm.weight", torch.ones(H, dtype=torch.bfloat16))
    for l in range(s.layers):
        p = f"model.layers.{l}"
        for k, sh in (
            ("q_proj", (s.heads * D, H)),
            ("k_proj", (s.kv_heads * D, H)),
            ("v_proj", (s.kv_heads * D, H)),
            ("o_proj", (H, s.heads * D)),
        ):
            add(f"{p}.self_attn.{k}.weight", rnd(*sh))
        for k in ("q_norm", "k_norm"):
            add(f"{p}.self_attn.{k}.weight", torch.ones(D, dtype=torch.bfloat16))
        for k in ("input_layernorm", "post_attention_layernorm"):
            add(f"{p}.{k}.weight", torch.ones(H, dtype=torch.bfloat16))
        add(f"{p}.mlp.gate.weight", rnd(E, H))
        for e in range(E):
            for k, sh in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                add(f"{p}.mlp.experts.{e}.{k}.weight", rnd(*sh))
    flush()
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    config = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": s.vocab,
        "hidden_size": H,
        "intermediate_size": 6144,
        "moe_intermediate_size": I,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": D,
        "num_experts": E,
        "num_experts_per_tok": s.top_k,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "rope_theta": 1e6,
        "tie_word_embeddings": False,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    write_tokenizer_files(
        tok,
        out,
        chat_template=CHAT_TEMPLATE,
        bos_token=None,
        eos_token=eos_token,
        pad_token=pad_token,
    )
