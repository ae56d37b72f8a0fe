"""Checkpoints stored in float16 or float32 (not only bfloat16) load and match transformers."""

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_checkpoints import load_reference

from ft_core import Engine
from bounds import assert_logits_close

IDS = [(i * 37 + 11) % 500 + 3 for i in range(40)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("arch", ["olmoe", "gpt_oss"])
def test_float16_and_float32_storage(tiny_ckpt, tmp_path, arch, dtype):
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt(arch), dst)
    for f in dst.glob("*.safetensors"):
        t = load_file(str(f))
        save_file(
            {k: v.to(dtype) if v.is_floating_point() else v for k, v in t.items()},
            str(f),
            metadata={"format": "pt"},
        )
    eng = Engine.from_pretrained(dst)
    assert eng.model.bank.tensors["w13"].dtype == dtype  # experts kept as stored
    ref = load_reference(dst)
    with torch.no_grad():
        want = ref(torch.tensor([IDS])).logits[0]
    assert_logits_close(eng.score(IDS), want, eng.model_config)
