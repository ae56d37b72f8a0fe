"""ft's GGUF parser (loader/gguf_parse.py) against llama.cpp's own reader (``gguf.GGUFReader``) on
the same files: llama.cpp's vocabulary files (tens of thousands of string tokens and merges, float
scores, token types) and a model written by the ``gguf`` writer with float, quantised and mixed
tensors: every metadata value, and every tensor's type, shape, offset, size and data view equal.
A file cut anywhere, in its header or its data, is refused naming it."""

import gguf
import numpy as np
import pytest
from llamacpp_files import llama_cpp_dir
from tiny_checkpoints import make_checkpoint
from tiny_gguf import write_gguf

from ft_core.errors import CheckpointError
from ft_core.loader.gguf_file import GGUFFile
from ft_core.loader.gguf_parse import ParsedGGUF

SIZES = dict(hidden_size=256, head_dim=64, intermediate_size=256, moe_intermediate_size=256)


def _same(path):
    ref, got = gguf.GGUFReader(str(path)), ParsedGGUF(str(path))
    keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert keys == list(got.fields)
    for k in keys:
        want = ref.fields[k].contents()
        assert type(got.fields[k]) is type(want) and got.fields[k] == want, k
    assert len(ref.tensors) == len(got.tensors)
    for a, b in zip(ref.tensors, got.tensors):
        assert (a.name, a.tensor_type, a.n_bytes, a.data_offset) == (
            b.name, b.tensor_type, b.n_bytes, b.data_offset,
        )  # fmt: skip
        assert a.shape.tolist() == b.shape.tolist()
        assert (a.data.dtype, a.data.shape) == (b.data.dtype, b.data.shape), a.name
        assert np.array_equal(a.data.view(np.uint8), b.data.view(np.uint8)), a.name
    return got


@pytest.mark.parametrize("name", ["qwen2", "llama-spm", "gpt-2"])
def test_vocabulary_files_parse_as_llama_cpps_reader(name):
    got = _same(llama_cpp_dir() / "models" / f"ggml-vocab-{name}.gguf")
    assert len(got.fields["tokenizer.ggml.tokens"]) > 30000


@pytest.mark.parametrize("experts,dense", [("Q4_K_M", "Q4_K_M"), ("BF16", "F16"), ("Q8_0", "Q4_0")])
def test_model_files_parse_as_llama_cpps_reader(tmp_path, experts, dense):
    hf = make_checkpoint("qwen3_moe", tmp_path / "hf", overrides=SIZES)
    path, _ = write_gguf(hf, tmp_path / "m.gguf", experts, dense)
    got = _same(path)
    assert {t.tensor_type.name for t in got.tensors} >= {"F32"}


def test_a_cut_file_is_refused_naming_it(tmp_path):
    hf = make_checkpoint("qwen3_moe", tmp_path / "hf", overrides=SIZES)
    path, _ = write_gguf(hf, tmp_path / "m.gguf", "Q4_0", "Q8_0")
    data = path.read_bytes()
    header = ParsedGGUF(str(path)).tensors[0].data_offset
    for n in (3, 20, header // 3, header - 1, header + 100, len(data) - 1):
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:n])
        with pytest.raises(CheckpointError, match=rf"cut{n}\.gguf: not a readable GGUF file"):
            GGUFFile(cut)
