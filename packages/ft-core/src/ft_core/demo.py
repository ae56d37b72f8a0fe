"""The built-in demo checkpoint: a tiny qwen3_moe with RANDOM weights, made deterministically by
this code on first use (no download), so ``ft`` runs on a fresh machine. Its text is gibberish:
it exists to show the machinery, not to answer questions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from ft_core.paths import cache_dir
from ft_core.tokenizer.build import train_bpe, write_tokenizer_files

DEMO_NAME = "ft-demo-qwen3-moe-v1"
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
VOCAB = 1024
CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "_comment": "ft demo model: random weights, for demonstration only",
    "vocab_size": VOCAB,
    "hidden_size": 128,
    "intermediate_size": 384,
    "moe_intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
    "bos_token_id": None,
}

# Qwen-style ChatML. All text is emitted by expressions, so whitespace control is exact.
CHAT_TEMPLATE = """
{%- set ns = namespace(sys='') -%}
{%- if messages and messages[0].role == 'system' -%}{%- set ns.sys = messages[0].content -%}{%- endif -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if ns.sys -%}{{- ns.sys + '\n\n' -}}{%- endif -%}
  {{- 'You may call these tools:' -}}
  {%- for t in tools -%}{{- '\n' + (t | tojson) -}}{%- endfor -%}
  {{- '\nAnswer a call as <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>\n' -}}
{%- elif ns.sys -%}
  {{- '<|im_start|>system\n' + ns.sys + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}
    {%- if not loop.first -%}{{- '<|im_start|>system\n' + m.content + '<|im_end|>\n' -}}{%- endif -%}
  {%- elif m.role == 'tool' -%}
    {{- '<|im_start|>user\n<tool_response>\n' + m.content + '\n</tool_response><|im_end|>\n' -}}
  {%- else -%}
    {{- '<|im_start|>' + m.role + '\n' -}}
    {%- if m.reasoning_content -%}{{- '<think>\n' + m.reasoning_content + '\n</think>\n\n' -}}{%- endif -%}
    {{- m.content or '' -}}
    {%- for c in m.tool_calls or [] -%}
      {%- set args = c.function.arguments -%}
      {{- '\n<tool_call>\n{"name": "' + c.function.name + '", "arguments": ' -}}
      {{- (args | tojson) if args is mapping else args -}}
      {{- '}\n</tool_call>' -}}
    {%- endfor -%}
    {{- '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
  {%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}
{%- endif -%}
"""


def _weights(seed: int = 0) -> dict[str, torch.Tensor]:
    c = CONFIG
    g = torch.Generator().manual_seed(seed)
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    N, K, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, I = c["num_experts"], c["moe_intermediate_size"]

    def rnd(*shape, std=0.02):
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    def norm(n):
        return (1 + torch.randn(n, generator=g) * 0.1).to(torch.bfloat16)

    w = {
        "model.embed_tokens.weight": rnd(V, H, std=1.0),
        "model.norm.weight": norm(H),
        "lm_head.weight": rnd(V, H, std=0.05),
    }
    for l in range(L):
        p = f"model.layers.{l}"
        w[f"{p}.input_layernorm.weight"] = norm(H)
        w[f"{p}.post_attention_layernorm.weight"] = norm(H)
        w[f"{p}.self_attn.q_proj.weight"] = rnd(N * D, H, std=0.06)
        w[f"{p}.self_attn.k_proj.weight"] = rnd(K * D, H, std=0.06)
        w[f"{p}.self_attn.v_proj.weight"] = rnd(K * D, H, std=0.06)
        w[f"{p}.self_attn.o_proj.weight"] = rnd(H, N * D, std=0.06)
        w[f"{p}.self_attn.q_norm.weight"] = norm(D)
        w[f"{p}.self_attn.k_norm.weight"] = norm(D)
        w[f"{p}.mlp.gate.weight"] = rnd(E, H, std=0.5)
        for e in range(E):
            w[f"{p}.mlp.experts.{e}.gate_proj.weight"] = rnd(I, H, std=0.06)
            w[f"{p}.mlp.experts.{e}.up_proj.weight"] = rnd(I, H, std=0.06)
            w[f"{p}.mlp.experts.{e}.down_proj.weight"] = rnd(H, I, std=0.06)
    return w


def write_demo_model(out: str | Path) -> Path:
    """Write the demo checkpoint into ``out`` (atomically: a temp dir renamed into place)."""
    out = Path(out)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(_weights(), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tok = train_bpe(VOCAB, SPECIAL)
    assert tok.get_vocab_size() <= VOCAB, "demo tokenizer outgrew the embedding table"
    eos = tok.token_to_id("<|im_end|>")
    (tmp / "config.json").write_text(json.dumps({**CONFIG, "eos_token_id": eos}, indent=2) + "\n")
    (tmp / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [eos], "temperature": 0.7}, indent=2) + "\n"
    )
    write_tokenizer_files(
        tok,
        tmp,
        chat_template=CHAT_TEMPLATE,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    (tmp / "README.md").write_text(
        "ft demo model: qwen3_moe architecture with RANDOM weights (gibberish output).\n"
    )
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out


def demo_model_path() -> Path:
    """Path of the demo checkpoint in the user cache ($FT_CACHE_DIR or $XDG_CACHE_HOME/ft), made if absent."""
    path = cache_dir() / DEMO_NAME
    if not (path / "config.json").is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_demo_model(path)
    return path
