"""Tiny random checkpoints of real MoE architectures, made with transformers, for engine tests.

    uv run python tests/tiny_checkpoints.py --arch qwen3_moe [--variant fp8] --out DIR
    uv run python tests/tiny_checkpoints.py --all --out DIR      # one sub-directory per (arch, variant)

A checkpoint is ``save_pretrained`` of ``AutoModelForCausalLM.from_config`` in bfloat16 (real tensor
names), made deterministic by ``torch.manual_seed``, plus a small BPE tokenizer with the family's
special tokens and chat template and a ``generation_config.json``. Random init leaves norms at 1
and biases at 0, so those get noise, and routers a larger std (see ``_perturb``). Variants rewrite
the saved tensors into other real layouts (``tiny_formats.py``). ``load_reference`` gives the
float32 transformers model with exactly the stored (or exactly dequantised) weights.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # sibling modules, also under pytest's --import-mode=importlib
    sys.path.insert(0, _HERE)
import tiny_formats as fmt  # noqa: E402
import tiny_tokenizers  # noqa: E402

transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars on every reference load

ARCHS = ["qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3", "gpt_oss", "glm4_moe"]
# Hybrids: Gated DeltaNet layers between gated full attention. qwen3_5_moe is saved as the hub does it,
# a vision-language wrapper (tiny vision tower) with the text model under ``model.language_model.``.
HYBRID_ARCHS = ["qwen3_next", "qwen3_5_moe"]
VARIANTS: list[tuple[str, str | None]] = [(a, None) for a in ARCHS + HYBRID_ARCHS] + [
    (
        "qwen3_5_moe",
        "fused",
    ),  # the hub layout of Qwen3.5/3.6: experts.gate_up_proj [E, 2I, H] under model.language_model.
    ("qwen3_moe", "fused"),
    ("qwen3_moe", "sharded"),
    ("qwen3_moe", "fp8"),
    ("deepseek_v3", "fp8"),
    ("gpt_oss", "mxfp4"),
]
FAMILY = {
    "qwen3_moe": "qwen",
    "qwen2_moe": "qwen",
    "mixtral": "mistral",
    "olmoe": "olmoe",
    "deepseek_v3": "deepseek",
    "gpt_oss": "harmony",
    "glm4_moe": "glm",
    "qwen3_next": "qwen",  # Qwen3-Next keeps Qwen3's hermes JSON calls
    "qwen3_5_moe": "qwen35",  # Qwen3.5 / 3.6: <function=...> XML calls, thinking opened by default
}
FP8_BLOCK = (32, 24)  # neither divides every dimension below (72, 64, 40, 112 ...)
SHARD_SIZE = "100KB"  # the sharded variant (~ 0.4 MB of weights) gets several files

_COMMON = dict(
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    initializer_range=0.1,  # larger than the default 0.02 so logits are well separated
)
# Sizes are tiny but keep every feature; moe intermediate sizes are not multiples of 16 (gpt_oss: 32, MXFP4).
CONFIGS: dict[str, dict] = {
    "qwen3_moe": dict(  # qk-norm, head_dim * heads != hidden
        hidden_size=64,
        head_dim=24,
        num_hidden_layers=2,
        intermediate_size=88,
        moe_intermediate_size=40,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    ),
    "qwen2_moe": dict(  # qkv bias, shared expert with sigmoid gate, layer 1 dense
        hidden_size=64,
        num_hidden_layers=3,
        mlp_only_layers=[1],
        intermediate_size=88,
        moe_intermediate_size=40,
        shared_expert_intermediate_size=56,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    ),
    "mixtral": dict(  # sliding window attention
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=72,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=16,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    ),
    "olmoe": dict(  # q/k norm over the whole projection
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=40,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    "deepseek_v3": dict(  # MLA with q_lora, yarn + mscale, grouped sigmoid routing, shared expert
        hidden_size=72,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        intermediate_size=112,
        moe_intermediate_size=40,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        n_shared_experts=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        num_key_value_heads=4,
        num_mtp_layers=0,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
    ),
    "gpt_oss": dict(  # sinks, alternating sliding/full, yarn, biased experts with clamped swiglu
        hidden_size=96,
        head_dim=16,
        num_hidden_layers=2,
        intermediate_size=64,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 16.0,
            "original_max_position_embeddings": 32,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
        },
    ),
    "glm4_moe": dict(  # partial rotary, qk-norm, attention bias, grouped sigmoid routing, shared expert
        hidden_size=64,
        head_dim=24,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        intermediate_size=112,
        moe_intermediate_size=40,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        n_shared_experts=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        use_qk_norm=True,
        attention_bias=True,
        num_mtp_layers=0,  # no MTP weights are written (transformers has no MTP module)
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
    ),
    "qwen3_next": dict(  # linear/full layers, a dense layer, grouped qkvz projections, Hv = 2 Hk, Dk != Dv
        hidden_size=64,
        head_dim=16,
        num_hidden_layers=4,
        intermediate_size=88,
        mlp_only_layers=[2],
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=12,
        linear_conv_kernel_dim=4,
        moe_intermediate_size=40,
        shared_expert_intermediate_size=56,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        max_position_embeddings=16384,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
        },
    ),
    "qwen3_5_moe": dict(  # text_config of the VL wrapper; flat in_proj_qkv/z/b/a, every layer MoE
        hidden_size=64,
        head_dim=16,
        num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=12,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        moe_intermediate_size=40,
        shared_expert_intermediate_size=56,
        num_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=16384,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    ),
}
# The vision tower of the qwen3_5_moe wrapper: as small as transformers allows (text tests never run it).
VISION_35 = dict(
    depth=1,
    hidden_size=32,
    intermediate_size=32,
    num_heads=2,
    out_hidden_size=64,
    patch_size=8,
    temporal_patch_size=1,
    num_position_embeddings=16,
)
# Router weight std: softmax routers get large logits; sigmoid routers must not saturate.
ROUTER_STD = {"deepseek_v3": 0.3, "glm4_moe": 0.3}


def make_config(
    arch: str, vocab_size: int, special_ids: dict, overrides: dict | None = None
) -> transformers.PretrainedConfig:
    text = {
        "vocab_size": vocab_size,
        **special_ids,
        **_COMMON,
        **CONFIGS[arch],
        **(overrides or {}),
    }
    if arch == "qwen3_5_moe":
        return AutoConfig.for_model(
            arch, text_config=text, vision_config=VISION_35, tie_word_embeddings=False
        )
    return AutoConfig.for_model(arch, **text)


def _auto_class(arch: str):
    """qwen3_5_moe checkpoints are the vision-language wrapper (as on the hub); the rest causal LMs."""
    return (
        transformers.AutoModelForImageTextToText if arch == "qwen3_5_moe" else AutoModelForCausalLM
    )


@torch.no_grad()
def _perturb(model: torch.nn.Module, arch: str) -> None:
    """Move the parameters random init leaves trivial: norms (1), biases / sinks / score bias (0), routers."""
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if not p.is_floating_point() or "rotary_emb" in name:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if (
            arch in HYBRID_ARCHS
            and "norm" in name
            and leaf == "weight"
            and "linear_attn" not in name
        ):
            p.copy_(0.2 * torch.randn_like(p, dtype=torch.float32))  # (1 + w) norms: w starts at 0
        elif (
            leaf == "A_log"
        ):  # decays exp(-A * softplus(.)) with A in [0.02, 2]: the state remembers
            p.copy_(torch.empty_like(p, dtype=torch.float32).uniform_(0.02, 2.0).log())
        elif "norm" in name and leaf == "weight":
            p.copy_(1.0 + 0.2 * torch.randn_like(p, dtype=torch.float32))
        elif leaf in ("bias", "sinks") or leaf.endswith("_bias"):
            std = {"e_score_correction_bias": 0.05, "sinks": 1.0}.get(leaf, 0.1)
            p.copy_(std * torch.randn_like(p, dtype=torch.float32))
        elif leaf == "weight" and (
            name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight")
        ):
            p.copy_(ROUTER_STD.get(arch, 0.5) * torch.randn_like(p, dtype=torch.float32))


def make_checkpoint(
    arch: str, out_dir, variant: str | None = None, seed: int = 0, overrides: dict | None = None
) -> Path:
    """Write the tiny ``(arch, variant)`` checkpoint into ``out_dir`` (created) and return its path;
    ``overrides``: config fields changed (e.g. sizes that whole quantisation blocks divide)."""
    if (arch, variant) not in VARIANTS:
        raise ValueError(f"unknown checkpoint {(arch, variant)}; known: {VARIANTS}")
    out = Path(out_dir)
    for stale in [
        *out.glob("*.safetensors"),
        *out.glob("*.safetensors.index.json"),
    ]:  # a previous build's
        stale.unlink()
    family = FAMILY[arch]
    tok = tiny_tokenizers.write_tokenizer(family, out)
    ids = tiny_tokenizers.special_ids(family, tok)
    config = make_config(arch, tok.get_vocab_size(with_added_tokens=True), ids, overrides)

    torch.manual_seed(seed)
    model = _auto_class(arch).from_config(config, dtype=torch.bfloat16)
    _perturb(model, arch)
    model.generation_config = GenerationConfig(**ids)
    model.save_pretrained(out, max_shard_size=SHARD_SIZE if variant == "sharded" else "1GB")

    if variant == "fused":
        fmt.write_tensors(out, fmt.fuse_experts(fmt.read_tensors(out)))
    elif variant == "fp8":
        fmt.write_tensors(out, fmt.fp8_quantize_all(fmt.read_tensors(out), FP8_BLOCK))
        fmt.update_config(
            out,
            quantization_config={
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": list(FP8_BLOCK),
            },
        )
    elif variant == "mxfp4":
        fmt.write_tensors(out, fmt.mxfp4_quantize_gpt_oss(fmt.read_tensors(out)))
        fmt.update_config(
            out,
            quantization_config={  # as in openai/gpt-oss-20b
                "quant_method": "mxfp4",
                "modules_to_not_convert": [
                    "model.layers.*.self_attn",
                    "model.layers.*.mlp.router",
                    "model.embed_tokens",
                    "lm_head",
                ],
            },
        )
    return out


def _from_pretrained(path) -> transformers.PreTrainedModel:
    # Eager attention: the plain reference for sinks and sliding windows. Eager experts: the
    # per-expert loop, the plainest semantics (the default "grouped_mm" gives the same logits here).
    arch = json.loads((Path(path) / "config.json").read_text())["model_type"]
    return _auto_class(arch).from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    )


def load_reference(path) -> transformers.PreTrainedModel:
    """The float32 transformers model of a tiny checkpoint, with the exact stored weights.

    FP8 is dequantised here in fp32 (transformers 5.24 dequantises to bf16 on a CPU and refuses
    weights that the block size does not divide); MXFP4 is dequantised by transformers, which is
    exact in fp32 (tested).
    """
    path = Path(path)
    quant = json.loads((path / "config.json").read_text()).get("quantization_config") or {}
    if quant.get("quant_method") != "fp8":
        return _from_pretrained(path).eval()
    block = tuple(quant["weight_block_size"])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copy(path / "config.json", tmp / "config.json")
        fmt.update_config(tmp, quantization_config=None)
        fmt.write_tensors(tmp, fmt.fp8_dequantize_all(fmt.read_tensors(path), block))
        return _from_pretrained(tmp).eval()


@torch.no_grad()
def reference_greedy(
    model: transformers.PreTrainedModel, ids: list[int], max_new_tokens: int
) -> list[int]:
    """Greedy continuation of ``ids`` by transformers' ``generate``: exactly ``max_new_tokens`` new ids.

    EOS is disabled rather than suppressed (``min_new_tokens`` would change the logits): ``generate``
    fills ``None`` fields from the model's generation_config, so an empty eos list is passed.
    """
    gen = GenerationConfig(
        do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=[], pad_token_id=0
    )
    inp = torch.tensor([ids])
    out = model.generate(inp, attention_mask=torch.ones_like(inp), generation_config=gen)
    new = out[0, len(ids) :].tolist()
    assert len(new) == max_new_tokens, (len(new), max_new_tokens)
    return new


def _dir_name(arch: str, variant: str | None) -> str:
    return arch if variant is None else f"{arch}-{variant}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", choices=ARCHS + HYBRID_ARCHS)
    ap.add_argument("--variant", default=None)
    ap.add_argument(
        "--all", action="store_true", help="every (arch, variant), into OUT/<arch>[-<variant>]"
    )
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.all == (args.arch is not None):
        ap.error("give exactly one of --arch and --all")
    todo = VARIANTS if args.all else [(args.arch, args.variant)]
    for arch, variant in todo:
        out = args.out / _dir_name(arch, variant) if args.all else args.out
        print(make_checkpoint(arch, out, variant, seed=args.seed))


if __name__ == "__main__":
    main()
