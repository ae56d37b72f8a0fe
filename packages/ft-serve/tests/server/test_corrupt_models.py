"""Corrupt checkpoints through the server (issue 14, defect 8): ``ft serve`` refuses a corrupt
config with the clear message and a non-zero exit (no traceback, no server that fails every
request), and a model whose forward goes NaN/inf answers each request a 500 "model produced
non-finite values" while the server goes on serving."""

import json
import shutil
import subprocess
import sys

import openai
import pytest
from safetensors.torch import load_file, save_file

from ft_core import Engine
from ft_core.demo import write_demo_model
from serve_helpers import API_KEY, start_server


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    return write_demo_model(tmp_path_factory.mktemp("demo") / "demo")


@pytest.mark.parametrize(
    "edit,want",
    [
        (
            lambda c: c.update(hidden_size="sixty-four"),
            "'hidden_size' must be a positive integer, got 'sixty-four'",
        ),
        (
            lambda c: c.update(num_experts_per_tok=17),
            "'num_experts_per_tok' (17) must be between 1 and 'num_experts'",
        ),
    ],
)
def test_serve_refuses_a_corrupt_config(demo_dir, tmp_path, edit, want):
    """The bare-traceback case and the one that used to start a server failing every request (the
    other corrupt configs: ft-core tests/test_config_validation.py, same CLI path)."""
    ckpt = shutil.copytree(demo_dir, tmp_path / "ckpt")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg = edit(cfg) or cfg
    (ckpt / "config.json").write_text(json.dumps(cfg))
    cmd = [sys.executable, "-m", "ft_serve.cli", "serve", "--model", str(ckpt), "--port", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and want in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def nan_server(demo_dir, tmp_path_factory):
    """The demo with one infinity in layer 1's o_proj (finite at load, NaN from layer 1 on),
    served."""
    ckpt = shutil.copytree(demo_dir, tmp_path_factory.mktemp("nan") / "ckpt")
    t = load_file(str(ckpt / "model.safetensors"))
    t["model.layers.1.self_attn.o_proj.weight"][0, 0] = float("inf")
    save_file(t, str(ckpt / "model.safetensors"))
    s = start_server(Engine.from_pretrained(ckpt), api_key=API_KEY)
    yield s
    s.stop()


def test_non_finite_model_answers_500_per_request(nan_server):
    client = openai.OpenAI(base_url=nan_server.url + "/v1", api_key=API_KEY, max_retries=0)
    for _ in range(2):  # each request fails alone; the server goes on
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(
                model="ft-test", max_tokens=4, messages=[{"role": "user", "content": "Hello"}]
            )
        assert e.value.status_code == 500 and "model produced non-finite values" in str(e.value)
    assert client.models.list().data[0].id == "ft-test"
