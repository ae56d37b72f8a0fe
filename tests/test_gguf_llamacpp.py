"""ft's GGUF reader against llama.cpp's own files (tests/llamacpp_files.py: the llama-cpp-python sdist):
its vocabulary test vectors (the ids llama.cpp expects for ~47 texts per vocabulary) through the
tokenizer ft rebuilds from each GGUF vocabulary, and tiny checkpoints converted by its own
convert_hf_to_gguf.py, whose logits in ft must equal transformers' on the original weights."""

import json
import subprocess
import sys

import pytest
import torch
from bounds import assert_logits_close
from llamacpp_files import llama_cpp_dir
from tiny_checkpoints import load_reference, make_checkpoint

from ft_core import Engine
from ft_core.loader.gguf_file import GGUFFile
from ft_core.tokenizer.gguf_vocab import gguf_tokenizer

IDS = [(i * 37 + 11) % 500 + 3 for i in range(48)]


@pytest.mark.parametrize("name", ["qwen2", "llama-bpe", "gpt-2"])
def test_vocabularies_give_llama_cpps_ids(name):
    models = llama_cpp_dir() / "models"
    path = models / f"ggml-vocab-{name}.gguf"
    tok = gguf_tokenizer(GGUFFile(path), str(path))[0]
    texts = (models / f"{path.name}.inp").read_text().split("\n__ggml_vocab_test__\n")
    want = (models / f"{path.name}.out").read_text().split("\n")
    assert len(texts) > 30
    for text, ids in zip(texts, want):
        assert tok.encode(text, add_special_tokens=False).ids == [int(x) for x in ids.split()], text


@pytest.fixture(scope="module")
def qwen_vocab(tmp_path_factory):
    """Qwen's real vocabulary (the converter recognises its tokenizer by hash) as tokenizer files."""
    path = llama_cpp_dir() / "models" / "ggml-vocab-qwen2.gguf"
    tok, config, _, _ = gguf_tokenizer(GGUFFile(path), str(path))
    return tok, config


@pytest.mark.parametrize(
    "arch,outtype",
    [("qwen3_moe", "f32"), ("qwen2_moe", "f32"), ("olmoe", "f32"), ("mixtral", "f32"),
     ("gpt_oss", "f32"), ("qwen3_moe", "bf16"), ("mixtral", "bf16")],
)  # fmt: skip
def test_llama_cpp_converted_checkpoints_match_transformers(tmp_path, qwen_vocab, arch, outtype):
    tok, config = qwen_vocab
    extra = {"qwen2_moe": {"mlp_only_layers": []}}.get(
        arch, {}
    )  # llama.cpp maps no dense qwen2moe layer
    hf = make_checkpoint(
        arch, tmp_path / arch, overrides={"vocab_size": tok.get_vocab_size(), **extra}
    )
    tok.save(str(hf / "tokenizer.json"))
    (hf / "tokenizer_config.json").write_text(
        json.dumps({**config, "tokenizer_class": "Qwen2Tokenizer"})
    )
    out = tmp_path / f"{arch}.gguf"
    res = subprocess.run(
        [sys.executable, str(llama_cpp_dir() / "convert_hf_to_gguf.py"), str(hf),
         "--outfile", str(out), "--outtype", outtype],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    eng = Engine.from_pretrained(out)
    ref = load_reference(hf)
    if arch == "mixtral":  # llama.cpp runs Mixtral without a sliding window
        ref.config.sliding_window = None
    with torch.no_grad():
        want = ref(torch.tensor([IDS])).logits[0].float()
    assert_logits_close(eng.score(IDS), want, eng.model_config)
