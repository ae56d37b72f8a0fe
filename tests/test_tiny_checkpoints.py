"""The tiny test checkpoints: real tensor names and formats, exact references, tokenizers."""

import json
import math

import pytest
import torch
import transformers
from safetensors import safe_open

import tiny_checkpoints as tc
import tiny_formats as fmt
import tiny_tokenizers
from ft_core.tokenizer import Tokenizer

IDS = [5, 99, 312, 47, 700, 13, 250, 601, 88, 401, 9, 77]


def _cfg(path) -> dict:
    return json.loads((path / "config.json").read_text())


_DTYPES = {
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F8_E4M3": torch.float8_e4m3fn,
    "U8": torch.uint8,
}


def _header(path) -> dict[str, tuple[torch.dtype, list[int]]]:
    """name -> (dtype, shape) of every stored tensor, read without loading the data."""
    out = {}
    for f in path.glob("*.safetensors"):
        with safe_open(f, "pt") as sf:
            for k in sf.keys():
                t = sf.get_slice(k)
                out[k] = (_DTYPES[t.get_dtype()], t.get_shape())
    return out


def _moe_layers(cfg: dict) -> list[int]:
    dense = set(cfg.get("mlp_only_layers") or []) | set(
        range(cfg.get("first_k_dense_replace") or 0)
    )
    return [i for i in range(cfg["num_hidden_layers"]) if i not in dense]


def _experts(cfg: dict) -> tuple[int, int]:
    """(number of routed experts, expert intermediate size)."""
    n = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg["n_routed_experts"]
    return n, cfg.get("moe_intermediate_size") or cfg["intermediate_size"]


@pytest.mark.parametrize("arch", tc.ARCHS)
def test_plain_layout(tiny_ckpt, arch):
    path = tiny_ckpt(arch)
    cfg, hdr = _cfg(path), _header(path)
    (E, I), H = _experts(cfg), cfg["hidden_size"]
    assert not list(path.glob("*.index.json"))
    for layer in _moe_layers(cfg):
        p = f"model.layers.{layer}."
        if arch == "mixtral":  # Mixtral keeps its original per-expert w1/w2/w3 names
            for e in range(E):
                for w, shape in (("w1", [I, H]), ("w2", [H, I]), ("w3", [I, H])):
                    assert hdr[f"{p}block_sparse_moe.experts.{e}.{w}.weight"] == (
                        torch.bfloat16,
                        shape,
                    )
            assert hdr[f"{p}block_sparse_moe.gate.weight"] == (torch.bfloat16, [E, H])
        elif arch == "gpt_oss":  # saved fused, [E, in, out], gate/up interleaved, with biases
            assert hdr[f"{p}mlp.experts.gate_up_proj"] == (torch.bfloat16, [E, H, 2 * I])
            assert hdr[f"{p}mlp.experts.down_proj"] == (torch.bfloat16, [E, I, H])
            assert hdr[f"{p}mlp.experts.gate_up_proj_bias"] == (torch.bfloat16, [E, 2 * I])
            assert hdr[f"{p}mlp.router.bias"] == (torch.bfloat16, [E])
            assert hdr[f"{p}self_attn.sinks"] == (torch.bfloat16, [cfg["num_attention_heads"]])
        else:
            for e in range(E):
                for w, shape in (("gate", [I, H]), ("up", [I, H]), ("down", [H, I])):
                    assert hdr[f"{p}mlp.experts.{e}.{w}_proj.weight"] == (torch.bfloat16, shape)
            router = torch.float32 if arch in ("deepseek_v3", "glm4_moe") else torch.bfloat16
            assert hdr[f"{p}mlp.gate.weight"] == (router, [E, H])
        if arch in ("deepseek_v3", "glm4_moe"):
            assert hdr[f"{p}mlp.gate.e_score_correction_bias"] == (torch.float32, [E])
            assert f"{p}mlp.shared_experts.gate_proj.weight" in hdr
        if arch == "qwen2_moe":
            assert (
                f"{p}mlp.shared_expert.down_proj.weight" in hdr
                and f"{p}mlp.shared_expert_gate.weight" in hdr
            )
    for layer in set(range(cfg["num_hidden_layers"])) - set(_moe_layers(cfg)):
        assert hdr[f"model.layers.{layer}.mlp.gate_proj.weight"] == (
            torch.bfloat16,
            [cfg["intermediate_size"], H],
        )
    fp32_routers = (
        "mlp.gate.weight",
        "mlp.gate.e_score_correction_bias",
    )  # deepseek/glm keep these in fp32
    assert {d for n, (d, _) in hdr.items() if not n.endswith(fp32_routers)} == {torch.bfloat16}


@pytest.mark.parametrize(
    ("arch", "variant"), [("qwen3_next", None), ("qwen3_5_moe", None), ("qwen3_5_moe", "fused")]
)
def test_hybrid_layout(tiny_ckpt, arch, variant):
    """Hybrids as the hub stores them: Qwen3-Next with grouped in_proj_qkvz/in_proj_ba under model.;
    Qwen3.5-MoE as the VL wrapper (text_config, model.language_model., a vision tower), flat in_proj_qkv/z/b/a,
    experts per expert or fused [E, 2I, H]."""
    path = tiny_ckpt(arch, variant)
    cfg, hdr = _cfg(path), _header(path)
    text = cfg.get("text_config") or cfg
    m = "model.language_model." if arch == "qwen3_5_moe" else "model."
    H, E, I = text["hidden_size"], text["num_experts"], text["moe_intermediate_size"]
    hk, hv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    dk, dv = text["linear_key_head_dim"], text["linear_value_head_dim"]
    conv = 2 * hk * dk + hv * dv
    for i, kind in enumerate(text["layer_types"]):
        p = f"{m}layers.{i}."
        if kind == "linear_attention":
            assert hdr[p + "linear_attn.conv1d.weight"] == (
                torch.bfloat16,
                [conv, 1, text["linear_conv_kernel_dim"]],
            )
            assert hdr[p + "linear_attn.A_log"][1] == [hv] and hdr[p + "linear_attn.norm.weight"][
                1
            ] == [dv]
            if arch == "qwen3_next":
                assert hdr[p + "linear_attn.in_proj_qkvz.weight"][1] == [conv + hv * dv, H]
                assert hdr[p + "linear_attn.in_proj_ba.weight"][1] == [2 * hv, H]
            else:
                assert hdr[p + "linear_attn.in_proj_qkv.weight"][1] == [conv, H]
                assert hdr[p + "linear_attn.in_proj_a.weight"][1] == [hv, H]
        else:  # gated attention: q_proj holds a query and a gate per head
            assert hdr[p + "self_attn.q_proj.weight"][1] == [
                2 * text["num_attention_heads"] * text["head_dim"],
                H,
            ]
        if i in (text.get("mlp_only_layers") or []):
            continue
        if variant == "fused":
            assert hdr[p + "mlp.experts.gate_up_proj"] == (torch.bfloat16, [E, 2 * I, H])
        else:
            assert hdr[p + f"mlp.experts.{E - 1}.down_proj.weight"] == (torch.bfloat16, [H, I])
        assert hdr[p + "mlp.shared_expert_gate.weight"][1] == [1, H]
    assert (cfg["model_type"] == "qwen3_5_moe") == (
        arch == "qwen3_5_moe"
    ) and "lm_head.weight" in hdr
    assert any(k.startswith("model.visual.") for k in hdr) == (arch == "qwen3_5_moe")


def test_fused_variant(tiny_ckpt):
    plain, fused = (
        fmt.read_tensors(tiny_ckpt("qwen3_moe")),
        fmt.read_tensors(tiny_ckpt("qwen3_moe", "fused")),
    )
    assert not any(".experts.0." in k for k in fused)
    E, I, H = 8, 40, 64
    for layer in range(2):
        p = f"model.layers.{layer}.mlp.experts."
        gu, down = fused[p + "gate_up_proj"], fused[p + "down_proj"]
        assert gu.shape == (E, 2 * I, H) and down.shape == (E, H, I) and gu.dtype == torch.bfloat16
        assert torch.equal(gu[3, :I], plain[p + "3.gate_proj.weight"])  # gate rows first
        assert torch.equal(gu[3, I:], plain[p + "3.up_proj.weight"])
        assert torch.equal(down[5], plain[p + "5.down_proj.weight"])


def test_sharded_variant(tiny_ckpt):
    path = tiny_ckpt("qwen3_moe", "sharded")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) >= 3 and all((path / f).is_file() for f in files)
    plain, sharded = fmt.read_tensors(tiny_ckpt("qwen3_moe")), fmt.read_tensors(path)
    assert set(index["weight_map"]) == set(sharded) == set(plain)
    assert all(torch.equal(plain[k], sharded[k]) for k in plain)


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_fp8_variant(tiny_ckpt, arch):
    path = tiny_ckpt(arch, "fp8")
    q, plain, cfg = fmt.read_tensors(path), fmt.read_tensors(tiny_ckpt(arch)), _cfg(path)
    assert cfg["quantization_config"] == {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": list(tc.FP8_BLOCK),
    }
    b0, b1 = tc.FP8_BLOCK
    ragged = 0
    for name, w in plain.items():
        if not fmt.is_fp8_target(name, w):
            assert q[name].dtype == w.dtype and name + "_scale_inv" not in q, name
            continue
        o, i = w.shape
        s = q[name + "_scale_inv"]
        assert q[name].dtype == torch.float8_e4m3fn and s.dtype == torch.float32
        assert s.shape == (math.ceil(o / b0), math.ceil(i / b1)), name
        ragged += o % b0 != 0 or i % b1 != 0
        deq = fmt.fp8_dequantize(q[name], s, tc.FP8_BLOCK)
        assert (deq - w.float()).norm() <= 0.05 * w.float().norm(), name
    assert ragged > 0
    names = set(q)
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= names
    assert any(n.endswith("experts.7.down_proj.weight_scale_inv") for n in names)
    if arch == "deepseek_v3":
        assert "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv" in names
        assert "model.layers.1.mlp.shared_experts.up_proj.weight_scale_inv" in names


def test_mxfp4_variant(tiny_ckpt):
    path = tiny_ckpt("gpt_oss", "mxfp4")
    q, plain, cfg = fmt.read_tensors(path), fmt.read_tensors(tiny_ckpt("gpt_oss")), _cfg(path)
    assert cfg["quantization_config"]["quant_method"] == "mxfp4"
    E, I, H = 8, cfg["intermediate_size"], cfg["hidden_size"]
    for layer in range(2):
        p = f"model.layers.{layer}.mlp.experts."
        assert p + "gate_up_proj" not in q and q[p + "gate_up_proj_bias"].dtype == torch.bfloat16
        for proj, out, inp in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
            blocks, scales = q[f"{p}{proj}_blocks"], q[f"{p}{proj}_scales"]
            assert blocks.dtype == scales.dtype == torch.uint8
            assert blocks.shape == (E, out, inp // 32, 16) and scales.shape == (E, out, inp // 32)
            deq = fmt.mxfp4_dequantize(blocks, scales).transpose(1, 2)  # back to [E, in, out]
            w = plain[p + proj].float()
            assert (deq - w).norm() <= 0.2 * w.norm()
    # the quantiser round-trips values that are already MXFP4
    p = "model.layers.0.mlp.experts.down_proj"
    w = fmt.mxfp4_dequantize(q[p + "_blocks"], q[p + "_scales"])
    assert torch.equal(fmt.mxfp4_dequantize(*fmt.mxfp4_quantize(w)), w)


def _expected_weights(arch, variant, path) -> dict[str, torch.Tensor]:
    """A few stored weights in the reference's in-memory naming, exactly as the reference must hold them."""
    raw = fmt.read_tensors(path)
    if variant == "fp8":
        raw = fmt.fp8_dequantize_all(raw, tc.FP8_BLOCK)
    if variant == "mxfp4":
        raw = fmt.mxfp4_dequantize_gpt_oss(raw)
    if arch == "mixtral":
        raw = {
            k.replace("block_sparse_moe", "mlp")
            .replace(".w1.", ".gate_proj.")
            .replace(".w3.", ".up_proj.")
            .replace(".w2.", ".down_proj."): v
            for k, v in raw.items()
        }
    if arch != "gpt_oss" and variant != "fused":
        raw = fmt.fuse_experts(raw)
    return {k: v.float() for k, v in raw.items()}


@pytest.mark.parametrize(("arch", "variant"), tc.VARIANTS, ids=[f"{a}-{v}" for a, v in tc.VARIANTS])
def test_reference(tiny_ckpt, arch, variant):
    path = tiny_ckpt(arch, variant)
    ref = tc.load_reference(path)
    state = ref.state_dict()
    assert not ref.training and all(p.dtype == torch.float32 for p in ref.parameters())
    want = _expected_weights(arch, variant, path)
    for name, w in want.items():  # every stored tensor, experts included, exactly
        assert torch.equal(state[name], w), name
    with torch.no_grad():
        logits = ref(torch.tensor([IDS])).logits[0]
    cfg = _cfg(path)
    vocab = (
        cfg.get("vocab_size") or cfg["text_config"]["vocab_size"]
    )  # qwen3_5_moe: the VL wrapper's text part
    assert logits.shape == (len(IDS), vocab) and torch.isfinite(logits).all()
    assert logits.std() > 0.3  # not a degenerate model


@pytest.mark.parametrize(
    "arch", ["gpt_oss", "mixtral"]
)  # eos in generation_config; sliding windows
def test_reference_greedy(tiny_ckpt, arch):
    ref = tc.load_reference(tiny_ckpt(arch))
    got = tc.reference_greedy(ref, IDS, 24)
    ids = list(IDS)
    with torch.no_grad():
        for _ in range(24):
            ids.append(int(ref(torch.tensor([ids])).logits[0, -1].argmax()))
    assert got == ids[len(IDS) :]


def test_deterministic(tmp_path):
    a = tc.make_checkpoint("olmoe", tmp_path / "a", seed=3)
    b = tc.make_checkpoint("olmoe", tmp_path / "b", seed=3)
    c = tc.make_checkpoint("olmoe", tmp_path / "c", seed=4)
    for f in (
        "model.safetensors",
        "tokenizer.json",
        "config.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


# ----------------------------------------------------------------------------------- tokenizers

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Two calls.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny, 21 C"},
    {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "rain, 15 C"},
    {
        "role": "assistant",
        "content": "Paris: sunny. Rome: rain.",
        "reasoning_content": "Summarise.",
    },
    {"role": "user", "content": "Thanks!"},
]
FAMILY_ARCH = {
    fam: next(a for a in tc.ARCHS + tc.HYBRID_ARCHS if tc.FAMILY[a] == fam)
    for fam in tiny_tokenizers.FAMILIES
}
FLAGS = {
    "qwen": "enable_thinking",
    "qwen35": "enable_thinking",
    "glm": "enable_thinking",
    "deepseek": "thinking",
}


@pytest.mark.parametrize("family", list(FAMILY_ARCH))
def test_tokenizer(tiny_ckpt, family):
    path = tiny_ckpt(FAMILY_ARCH[family])
    fam = tiny_tokenizers.FAMILIES[family]
    hf, ft = transformers.AutoTokenizer.from_pretrained(path), Tokenizer.from_dir(path)
    cfg = _cfg(path)
    assert len(hf) == ft.vocab_size == (cfg.get("vocab_size") or cfg["text_config"]["vocab_size"])
    for tok in fam.special + fam.added:  # each is one id, special exactly where the family marks it
        (i,) = hf.encode(tok, add_special_tokens=False)
        assert ft.token_to_id(tok) == i and (i in ft.special_ids) == (tok in fam.special), tok
    gen = json.loads((path / "generation_config.json").read_text())
    eos = gen["eos_token_id"] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"]]
    assert [ft.id_to_token(i) for i in eos] == list(fam.generation_eos)
    bos = fam.generation_bos or fam.bos
    assert gen.get("bos_token_id") == (ft.token_to_id(bos) if bos else None)

    cases = [
        dict(messages=CHAT, tools=TOOLS, add_generation_prompt=True),
        dict(
            messages=CHAT[:5], tools=TOOLS, add_generation_prompt=True
        ),  # mid tool loop: reasoning kept
        dict(messages=CHAT[1:3], tools=None, add_generation_prompt=False),
        dict(messages=CHAT[-1:], tools=None, add_generation_prompt=True),
    ]
    if family in FLAGS:
        cases += [
            dict(messages=CHAT, tools=TOOLS, add_generation_prompt=True, **{FLAGS[family]: on})
            for on in (True, False)
        ]
    for kw in cases:
        msgs, flags = kw.pop("messages"), dict(kw)
        want = hf.apply_chat_template(msgs, tokenize=False, **flags)
        got = ft.apply_chat_template(msgs, **flags)
        assert got == want, kw
        assert ft.encode(want, add_special_tokens=False) == hf.encode(
            want, add_special_tokens=False
        )
        if msgs is CHAT:
            assert all(
                s in want
                for s in ("You are terse.", "Weather of a city.", "Paris", "Rome", "rain, 15 C")
            )
    for text in ("hello world", "def f(x):\n    return x"):  # BOS exactly where the family adds one
        ids = ft.encode(text)
        assert ids == hf.encode(text)
        bos = [ft.token_to_id(fam.bos)] if fam.bos else []
        assert ids == bos + ft.encode(text, add_special_tokens=False)


def test_qwen35_template(tiny_ckpt):
    """Qwen3.5 / 3.6 structure: the tool list opens the system turn, calls are <function=...> blocks (strings
    raw, other values JSON), reasoning survives only after the last user query (or with preserve_thinking),
    the generation prompt opens a thinking block, or closes an empty one when thinking is off."""
    ft = Tokenizer.from_dir(tiny_ckpt("qwen3_5_moe"))
    calls = [
        {
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
        }
    ]
    turn = [
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Call it.", "tool_calls": calls},
        {"role": "tool", "content": "sunny"},
    ]
    text = ft.apply_chat_template([CHAT[0], *turn], tools=TOOLS, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n# Tools\n") and "</tools>" in text
    assert text.index("</tools>") < text.index("You are terse.<|im_end|>")
    assert (
        "<|im_start|>assistant\n<think>\nCall it.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    ) in text and text.endswith("<|im_start|>assistant\n<think>\n")
    later = [
        *turn,
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Thanks"},
    ]
    assert "Call it." not in ft.apply_chat_template(later, add_generation_prompt=True)
    assert "Call it." in ft.apply_chat_template(
        later, add_generation_prompt=True, preserve_thinking=True
    )
    off = ft.apply_chat_template(turn[:1], add_generation_prompt=True, enable_thinking=False)
    assert (
        off == "<|im_start|>user\nParis?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
