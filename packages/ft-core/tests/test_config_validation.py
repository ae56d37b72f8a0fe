"""Corrupt checkpoints of the QA run (issue 14, defect 8), each built from the real demo
checkpoint: config fields of the wrong type or range and config.json not an object are
CheckpointErrors naming the field and the file; weights of a dtype the architecture cannot hold, or
random bytes, are refused at load naming file and tensor; a model whose forward goes non-finite
fails its request once with NonFiniteError naming the first layer, and leaves nothing behind."""

import json
import random
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from ft_core import CheckpointError, Engine, NonFiniteError, SamplingParams


def _edit_config(ckpt, fn):
    path = ckpt / "config.json"
    cfg = json.loads(path.read_text())
    cfg = fn(cfg) or cfg
    path.write_text(json.dumps(cfg))


def _rewrite(path, fn):
    t = load_file(str(path))
    fn(t)
    save_file(t, str(path))


@pytest.mark.parametrize(
    "field,value,want",
    [
        ("hidden_size", "sixty-four", "'hidden_size' must be a positive integer, got 'sixty-four'"),
        ("hidden_size", True, "'hidden_size' must be a positive integer, got True"),
        ("num_hidden_layers", -2, "'num_hidden_layers' must be a positive integer, got -2"),
        ("vocab_size", 1024.5, "'vocab_size' must be a positive integer, got 1024.5"),
        ("num_experts", [16], "'num_experts' must be a non-negative integer, got [16]"),
        ("rms_norm_eps", "tiny", "'rms_norm_eps' must be a positive finite number, got 'tiny'"),
        ("tie_word_embeddings", "no", "'tie_word_embeddings' must be true or false, got 'no'"),
        (
            "mlp_only_layers",
            "none",
            "'mlp_only_layers' must be a list of non-negative integers, got 'none'",
        ),
        ("rope_scaling", [1, 2], "'rope_scaling' must be a JSON object, got [1, 2]"),
    ],
)
def test_config_field_of_wrong_type_is_named(demo_copy, field, value, want):
    _edit_config(demo_copy, lambda c: c.update({field: value}))
    with pytest.raises(CheckpointError) as e:
        Engine.from_pretrained(demo_copy)
    assert str(e.value) == f"{demo_copy / 'config.json'}: {want}"


def test_config_that_is_a_list_is_named(demo_copy):
    (demo_copy / "config.json").write_text(json.dumps([{"model_type": "qwen3_moe"}]))
    with pytest.raises(CheckpointError, match=r"config\.json: must be a JSON object, got a list"):
        Engine.from_pretrained(demo_copy)


@pytest.mark.parametrize(
    "edit,want",
    [
        (
            {"num_experts_per_tok": 17},
            r"'num_experts_per_tok' \(17\) must be between 1 and 'num_experts' \(16\)",
        ),
        (
            {"num_key_value_heads": 3},
            r"'num_attention_heads' \(4\) must be a multiple of 'num_key_value_heads' \(3\)",
        ),
        ({"num_experts_per_tok": 0}, r"'num_experts_per_tok' must be a positive integer, got 0"),
    ],
)
def test_config_fields_out_of_range_together(demo_copy, edit, want):
    _edit_config(demo_copy, lambda c: c.update(edit))
    with pytest.raises(CheckpointError, match=rf"config\.json: {want}"):
        Engine.from_pretrained(demo_copy)


@pytest.mark.parametrize(
    "name",
    [
        "model.embed_tokens.weight",
        "model.layers.1.mlp.experts.3.up_proj.weight",
        "model.layers.0.self_attn.q_proj.weight",
    ],
)
def test_integer_weight_is_refused(demo_copy, name):
    _rewrite(
        demo_copy / "model.safetensors", lambda t: t.update({name: (t[name] * 100).to(torch.int32)})
    )
    with pytest.raises(CheckpointError) as e:
        Engine.from_pretrained(demo_copy)
    msg = str(e.value)
    assert "model.safetensors" in msg and repr(name) in msg and "stored as int32" in msg


def test_random_bytes_in_weights_are_refused_at_load(demo_copy):
    """The header intact, every data byte random (bf16: ~1/256 of values NaN/inf): the
    embedding scan names the file and the tensor instead of a server whose every request fails."""
    f = demo_copy / "model.safetensors"
    data = bytearray(f.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    data[start:] = random.Random(0).randbytes(len(data) - start)
    f.write_bytes(bytes(data))
    want = r"model\.safetensors: tensor '[^']+' holds \d+ NaN/inf values"
    with pytest.raises(CheckpointError, match=want):
        Engine.from_pretrained(demo_copy)


@pytest.fixture(scope="module")
def nan_model(demo_dir, tmp_path_factory):
    """The demo with one infinity in layer 1's o_proj: finite at load (projections are not scanned),
    non-finite from layer 1's attention on for every token."""
    import shutil

    d = shutil.copytree(demo_dir, tmp_path_factory.mktemp("nan") / "ckpt")
    name = "model.layers.1.self_attn.o_proj.weight"

    def poison(t):
        t[name][0, 0] = float("inf")

    _rewrite(d / "model.safetensors", poison)
    return d


def test_non_finite_logits_fail_the_request_naming_the_layer(nan_model, caplog):
    eng = Engine.from_pretrained(nan_model)
    free = eng.kv.free_pages
    seq = eng.add_request(list(range(5, 45)), SamplingParams(max_tokens=4))  # whole pages to cache
    with caplog.at_level("ERROR", logger="ft_core.engine"):
        with pytest.raises(NonFiniteError) as e:
            eng.step()
    assert str(e.value) == (
        "model produced non-finite values (NaN/inf logits; first in layer 1 attention)"
    )
    assert e.value.seq_ids == (seq.seq_id,) and e.value.advanced == []
    assert e.value.where == "layer 1 attention"
    assert seq.finish_reason == "error" and seq.output_ids == []
    assert [r.message for r in caplog.records if "non-finite" in r.message] == [
        f"model produced non-finite values (NaN/inf logits) for sequence(s) [{seq.seq_id}]; "
        "first in layer 1 attention"
    ]
    # raised once: the sequence is gone, nothing of it was cached, and the engine is idle again
    assert eng.step() == [] and not eng.scheduler.has_work()
    assert seq.seq_id not in eng.kv.tables and eng.kv.free_pages == free
    assert eng.prefix_stats()["enabled"] and eng.prefix_stats()["cached_pages"] == 0
