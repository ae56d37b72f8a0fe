"""Hub checkpoints spell config.json the pre-transformers-5 way (``rope_theta`` + ``rope_scaling``,
``num_experts``, top-level ``partial_rotary_factor``). Rewriting a tiny checkpoint's config that way
must give the same logits as the transformers-5 spelling it was saved with."""

import json
import shutil

import pytest

from ft_core import Engine

IDS = [(i * 37 + 11) % 500 + 3 for i in range(40)]


def _legacy(cfg: dict) -> dict:
    cfg = dict(cfg)
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    if "partial_rotary_factor" in rp:
        cfg["partial_rotary_factor"] = rp.pop("partial_rotary_factor")
    kind = rp.pop("rope_type")
    if kind != "default":
        cfg["rope_scaling"] = {"type": kind, **rp}  # DeepSeek-V3's hub config says "type"
    if cfg["model_type"] == "qwen3_moe":
        cfg["num_experts"] = cfg.pop("num_local_experts")
    cfg["torch_dtype"] = cfg.pop("dtype", "bfloat16")
    return cfg


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3", "glm4_moe", "gpt_oss", "qwen3_next"])
def test_legacy_spelling_same_logits(tiny_ckpt, tmp_path, arch):
    src = tiny_ckpt(arch)
    dst = tmp_path / arch
    shutil.copytree(src, dst)
    cfg = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(_legacy(cfg)))
    a = Engine.from_pretrained(src)
    b = Engine.from_pretrained(dst)
    assert a.model_config.rope == b.model_config.rope and a.model_config.moe == b.model_config.moe
    assert (a.score(IDS) - b.score(IDS)).abs().max() == 0
