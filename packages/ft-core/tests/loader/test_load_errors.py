"""Bad checkpoints give clear FTError messages naming the file, tensor or field (and a CLI exit 1)."""

import json

import pytest
from safetensors.torch import load_file, save_file

from ft_core import CheckpointError, Engine, UnsupportedArchitectureError


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        Engine.from_pretrained(tmp_path / "nope")


def test_missing_config(demo_copy):
    (demo_copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: missing"):
        Engine.from_pretrained(demo_copy)


def test_unknown_model_type_lists_supported(demo_copy):
    cfg = json.loads((demo_copy / "config.json").read_text())
    cfg["model_type"] = "llama_moe_9000"
    (demo_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedArchitectureError) as e:
        Engine.from_pretrained(demo_copy)
    msg = str(e.value)
    assert "llama_moe_9000" in msg
    for arch in [
        "qwen3_moe",
        "qwen2_moe",
        "mixtral",
        "olmoe",
        "deepseek_v3",
        "gpt_oss",
        "glm4_moe",
    ]:
        assert arch in msg


def test_missing_config_field_is_named(demo_copy):
    cfg = json.loads((demo_copy / "config.json").read_text())
    del cfg["num_experts"]
    (demo_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="'num_experts' is missing"):
        Engine.from_pretrained(demo_copy)


def _rewrite(path, fn):
    t = load_file(str(path))
    fn(t)
    save_file(t, str(path))


def test_missing_tensor_named_with_file(demo_copy):
    _rewrite(
        demo_copy / "model.safetensors", lambda t: t.pop("model.layers.2.self_attn.k_proj.weight")
    )
    with pytest.raises(
        CheckpointError, match=r"model\.layers\.2\.self_attn\.k_proj\.weight' is missing"
    ):
        Engine.from_pretrained(demo_copy)


def test_missing_expert_tensor_named(demo_copy):
    _rewrite(
        demo_copy / "model.safetensors",
        lambda t: t.pop("model.layers.1.mlp.experts.5.up_proj.weight"),
    )
    with pytest.raises(CheckpointError, match=r"experts\.5\.up_proj\.weight' is missing"):
        Engine.from_pretrained(demo_copy)


def test_misshaped_tensor_named_with_file_and_shapes(demo_copy):
    def cut(t):
        t["model.layers.0.self_attn.o_proj.weight"] = t["model.layers.0.self_attn.o_proj.weight"][
            :, :-1
        ].contiguous()

    _rewrite(demo_copy / "model.safetensors", cut)
    with pytest.raises(CheckpointError) as e:
        Engine.from_pretrained(demo_copy)
    msg = str(e.value)
    assert "model.safetensors" in msg and "model.layers.0.self_attn.o_proj.weight" in msg
    assert "[128, 127]" in msg and "[128, 128]" in msg


def test_truncated_safetensors_named(demo_copy):
    f = demo_copy / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated safetensors file"):
        Engine.from_pretrained(demo_copy)


def test_corrupt_header_named(demo_copy):
    f = demo_copy / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[8:16] = b"\xff" * 8
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt safetensors header"):
        Engine.from_pretrained(demo_copy)


def test_missing_shard_named(demo_copy):
    (demo_copy / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}})
    )
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors: shard listed"):
        Engine.from_pretrained(demo_copy)


def test_missing_tokenizer_named(demo_copy):
    (demo_copy / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: missing"):
        Engine.from_pretrained(demo_copy)
